"""One entry point for every operation: `Runtime.call(method, params)`.

The local provider calls it in-process and the agent calls it for each
JSON-RPC request, so argument checking, jail and results are shared code.
"""

from __future__ import annotations

from typing import Any, Mapping

from .capture import Redactor
from .context import Context
from .errors import ErrorCode, SandboxError
from .operations import OPERATIONS
from .oserrors import to_sandbox_error

_PARAMETERS = {name: frozenset(op.parameter_names) for name, op in OPERATIONS.items()}


class Runtime:
    """Runs operations against the files of one sandbox."""

    def __init__(self, context: Context) -> None:
        self.context = context
        self._redact = Redactor(context.secrets)

    def call(self, method: str, params: Mapping[str, Any]) -> Any:
        operation = OPERATIONS.get(method)
        if operation is None:
            raise SandboxError(ErrorCode.INVALID_ARGUMENT, "unknown operation %r" % method)
        if not isinstance(params, Mapping):
            raise SandboxError(ErrorCode.INVALID_ARGUMENT, "params must be an object")
        unknown = set(params) - _PARAMETERS[method]
        if unknown:
            raise SandboxError(
                ErrorCode.INVALID_ARGUMENT,
                "%s got unknown argument(s): %s" % (method, ", ".join(sorted(unknown))),
            )
        try:
            return operation.function(self.context, **params)
        except SandboxError as exc:
            raise self._clean(exc.code, exc.message) from None
        except TypeError as exc:
            raise self._clean(ErrorCode.INVALID_ARGUMENT, str(exc)) from None
        except MemoryError:
            raise SandboxError(ErrorCode.TOO_LARGE, "%s ran out of memory" % method) from None
        except OSError as exc:
            error = to_sandbox_error(self.context.mapping, exc)
            raise self._clean(error.code, error.message) from None

    def _clean(self, code: ErrorCode, message: str) -> SandboxError:
        """Masked like every result; redacted too, since messages echo the caller's input."""
        return SandboxError(code, self._redact(self.context.mapping.mask(message)))
