"""One errno -> ErrorCode table, so an OSError means the same code everywhere.

Operations that know which virtual path they were working on pass it in;
the filename inside an OSError raised through a directory fd is only the
last component and would make a poor message.
"""

from __future__ import annotations

import errno

from .errors import ErrorCode, SandboxError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Dict, Optional

    from .pathmap import PathMapping

_BY_ERRNO: Dict[int, ErrorCode] = {
    errno.ENOENT: ErrorCode.NOT_FOUND,
    errno.ENXIO: ErrorCode.NOT_FOUND,
    errno.ENOTDIR: ErrorCode.NOT_A_DIRECTORY,
    errno.EISDIR: ErrorCode.IS_A_DIRECTORY,
    errno.EACCES: ErrorCode.ACCESS_DENIED,
    errno.EPERM: ErrorCode.ACCESS_DENIED,
    errno.ELOOP: ErrorCode.ACCESS_DENIED,
    errno.EXDEV: ErrorCode.ACCESS_DENIED,
    errno.EROFS: ErrorCode.READ_ONLY,
    errno.ENOSPC: ErrorCode.TOO_LARGE,
    errno.EFBIG: ErrorCode.TOO_LARGE,
    errno.ENAMETOOLONG: ErrorCode.INVALID_ARGUMENT,
    errno.E2BIG: ErrorCode.INVALID_ARGUMENT,
    errno.EINVAL: ErrorCode.INVALID_ARGUMENT,
    errno.EILSEQ: ErrorCode.INVALID_ARGUMENT,
    errno.EEXIST: ErrorCode.INVALID_ARGUMENT,
    errno.ENOTEMPTY: ErrorCode.INVALID_ARGUMENT,
    errno.EMFILE: ErrorCode.CAPACITY,
    errno.ENFILE: ErrorCode.CAPACITY,
    errno.ENOMEM: ErrorCode.CAPACITY,
    errno.EAGAIN: ErrorCode.CAPACITY,
    errno.ETIMEDOUT: ErrorCode.TIMEOUT,
}
# Not defined on every platform the agent may run on.
for _name in ("EDQUOT",):
    if hasattr(errno, _name):
        _BY_ERRNO[getattr(errno, _name)] = ErrorCode.TOO_LARGE

_MESSAGES: Dict[ErrorCode, str] = {
    ErrorCode.NOT_FOUND: "%s does not exist",
    ErrorCode.IS_A_DIRECTORY: "%s is a directory",
    ErrorCode.NOT_A_DIRECTORY: "%s: a path component is not a directory",
    ErrorCode.READ_ONLY: "%s is on a read-only file system",
}


def code_for(exc: OSError) -> ErrorCode:
    return _BY_ERRNO.get(exc.errno or 0, ErrorCode.INTERNAL)


def to_sandbox_error(
    mapping: PathMapping, exc: OSError, virtual: Optional[str] = None
) -> SandboxError:
    """Classify `exc`; the message names `virtual` (or the masked filename)."""
    code = code_for(exc)
    if virtual is None and exc.filename is not None:
        virtual = mapping.to_virtual(str(exc.filename))
    reason = exc.strerror or str(exc) or type(exc).__name__
    if virtual is None:
        text = reason
    elif code in _MESSAGES:
        text = _MESSAGES[code] % virtual
    else:
        text = "%s: %s" % (virtual, reason)
    return SandboxError(code, mapping.mask(text))
