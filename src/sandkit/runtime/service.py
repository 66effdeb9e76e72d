"""One entry point for every operation: `Runtime.call(method, params)`.

The local provider calls it in-process and the agent calls it for each
JSON-RPC request, so argument checking, jail and results are shared code.
"""

from __future__ import annotations

from collections.abc import Mapping

from .capture import Redactor
from .errors import ErrorCode, SandboxError
from .operations import OPERATIONS
from .oserrors import to_sandbox_error

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, Optional

    from .cancel import Cancel
    from .context import Context
    from .operations import Operation

# Filled on each method's first call (the table imports an operation's module then).
_PARAMETERS: Dict[str, "frozenset[str]"] = {}


class Runtime:
    """Runs operations against the files of one sandbox."""

    def __init__(self, context: Context) -> None:
        self.context = context
        self._redact = Redactor(context.secrets)

    def call(self, method: str, params: Mapping[str, Any]) -> Any:
        operation = self._operation(method, params)
        if operation.streaming:  # called plainly: its events go nowhere
            return self._run(method, lambda: operation.function(self.context, **params, emit=_drop))
        return self._run(method, lambda: operation.function(self.context, **params))

    def stream(
        self,
        method: str,
        params: Mapping[str, Any],
        emit: Callable[[Dict[str, Any]], None],
        cancel: Optional[Cancel] = None,
    ) -> Any:
        """Run a streaming operation: each event goes to `emit` as it happens; the result
        is returned. A set `cancel` ends it (Cancelled is raised)."""
        operation = self._operation(method, params)
        if not operation.streaming:
            raise SandboxError(ErrorCode.INVALID_ARGUMENT, "%s does not stream" % method)
        return self._run(
            method, lambda: operation.function(self.context, **params, emit=emit, cancel=cancel)
        )

    def _operation(self, method: str, params: Mapping[str, Any]) -> Operation:
        operation = OPERATIONS.get(method)
        if operation is None:
            raise SandboxError(ErrorCode.INVALID_ARGUMENT, "unknown operation %r" % method)
        if not isinstance(params, Mapping):
            raise SandboxError(ErrorCode.INVALID_ARGUMENT, "params must be an object")
        known = _PARAMETERS.get(method)
        if known is None:
            known = _PARAMETERS[method] = frozenset(operation.parameter_names)
        unknown = set(params) - known
        if unknown:
            raise SandboxError(
                ErrorCode.INVALID_ARGUMENT,
                "%s got unknown argument(s): %s" % (method, ", ".join(sorted(unknown))),
            )
        return operation

    def _run(self, method: str, run: Callable[[], Any]) -> Any:
        try:
            return run()
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


def _drop(_event: Dict[str, Any]) -> None:
    pass
