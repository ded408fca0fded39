# Writes ${OUT}: the git commit and dirty flag of ${SRC}, rewritten only when they change.
# PULSE_GIT_COMMIT (and PULSE_GIT_DIRTY, 0 or 1) in the environment name them instead: for a
# copy of the tree whose git metadata is not the tree's (the GPU machine's copy keeps the
# metadata of the session's first call).
if(DEFINED ENV{PULSE_GIT_COMMIT} AND NOT "$ENV{PULSE_GIT_COMMIT}" STREQUAL "")
  set(commit "$ENV{PULSE_GIT_COMMIT}")
  if("$ENV{PULSE_GIT_DIRTY}" STREQUAL "1")
    set(dirty 1)
  else()
    set(dirty 0)
  endif()
else()
  execute_process(COMMAND git -C ${SRC} rev-parse HEAD OUTPUT_VARIABLE commit
                  OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    set(commit "unknown")
  endif()
  execute_process(COMMAND git -C ${SRC} status --porcelain --untracked-files=no
                  OUTPUT_VARIABLE status ERROR_QUIET)
  if(status)
    set(dirty 1)
  else()
    set(dirty 0)
  endif()
endif()
set(text "const char *pulse_git_commit = \"${commit}\";\nint pulse_git_dirty = ${dirty};\n")
if(EXISTS ${OUT})
  file(READ ${OUT} old)
endif()
if(NOT "${old}" STREQUAL "${text}")
  file(WRITE ${OUT} "${text}")
endif()
