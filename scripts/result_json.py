"""Shared by the scripts that read pulse's result JSON."""


def get(d, *path, default=None):
    """The value at d[path[0]][path[1]]..., or default where a key is missing."""
    for k in path:
        if not isinstance(d, dict) or k not in d:
            return default
        d = d[k]
    return d
