"""Every public signature agrees with the operation table (runtime/operations.py).

The table's runtime functions declare each operation's parameters; `Sandbox`
(sync and async), the agent protocol, the tools, the CLI, the hand-written
`SandboxTools` methods and the integrations are held to them here, so a
forgotten or mismatched parameter fails CI instead of a user's call.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from pydantic import BaseModel

from sandkit import models
from sandkit.agent import protocol as p
from sandkit.cli import commands, processes
from sandkit.runtime.operations import OPERATIONS, Operation
from sandkit.sandbox import Sandbox
from sandkit.tools import SPECS, SandboxTools
from sandkit.tools.specs import ToolSpec

OPS = sorted(OPERATIONS.values(), key=lambda op: op.name)
NOT_OPERATIONS = {
    "call",
    "acall",
    "open_stream",
    "close",
    "limits",
    "sandbox_id",
    "execute_enabled",
}


def params(fn: Callable[..., Any]) -> list[inspect.Parameter]:
    return [p for p in inspect.signature(fn).parameters.values() if p.name != "self"]


def shape(parameters: list[inspect.Parameter]) -> list[tuple[str, Any]]:
    return [(p.name, p.default) for p in parameters]


@pytest.mark.parametrize("op", OPS, ids=lambda op: op.name)
def test_sandbox_sync_and_async_match_the_runtime(op: Operation) -> None:
    runtime = shape(list(op.parameters))
    for name in (op.name, "a" + op.name):
        method = getattr(Sandbox, name)
        assert shape(params(method)) == runtime, f"Sandbox.{name} differs from the runtime"
    hints = typing.get_type_hints(getattr(Sandbox, op.name))
    expected: Any = bytes if op.bytes_result else getattr(models, op.result)
    twin = getattr(Sandbox, "a" + op.name)
    if op.streaming:  # events, then the result
        expected = Iterator[models.OutputChunk | expected]
        assert inspect.isasyncgenfunction(twin)
        assert (
            typing.get_type_hints(twin)["return"]
            == AsyncIterator[models.OutputChunk | models.ExecuteResult]
        )
    else:
        assert inspect.iscoroutinefunction(twin)
    assert hints["return"] == expected


def test_every_public_sandbox_operation_is_in_the_table() -> None:
    public = {n for n in dir(Sandbox) if not n.startswith("_")} - NOT_OPERATIONS
    declared = set(OPERATIONS) | {"a" + name for name in OPERATIONS}
    assert public == declared


def test_the_protocol_tables_follow_the_table() -> None:
    for op in OPS:
        assert (op.name in p.READ_ONLY_METHODS) is op.read_only
        assert p.BYTES_PARAMS.get(op.name) == op.bytes_param
        assert (op.name in p.BYTES_RESULTS) is op.bytes_result
        if op.bytes_param is not None:
            assert op.bytes_param in op.parameter_names
        assert op.result == "bytes" or issubclass(getattr(models, op.result), BaseModel)


def _tool_parameter(spec: ToolSpec, field: str) -> str:
    return spec.aliases.get(field, field)


@pytest.mark.parametrize("spec", SPECS, ids=lambda spec: spec.name)
def test_each_tool_maps_onto_its_operation(spec: ToolSpec) -> None:
    op = OPERATIONS[spec.operation]
    runtime = {p.name: p for p in op.parameters}
    assert spec.extras <= set(spec.args.model_fields)
    for field, info in spec.args.model_fields.items():
        if field in spec.extras:
            continue
        name = _tool_parameter(spec, field)
        assert name in runtime, f"tool {spec.name}: {field} is no parameter of {op.name}"
        wanted = runtime[name].default
        if wanted is inspect.Parameter.empty:
            assert info.is_required(), f"tool {spec.name}: {field} is required by {op.name}"
        elif not info.is_required():
            assert info.default == wanted, f"tool {spec.name}: default of {field}"
    covered = {_tool_parameter(spec, f) for f in spec.args.model_fields if f not in spec.extras}
    for name, parameter in runtime.items():
        if name not in covered:  # the tool leaves it to the operation's default
            assert parameter.default is not inspect.Parameter.empty, (spec.name, name)
    assert spec.result is getattr(models, op.result)


def test_bash_in_the_background_spawns_with_the_arguments_spawn_takes() -> None:
    spec = next(s for s in SPECS if s.name == "bash")
    args = spec.args.model_validate({"command": "sleep 1", "run_in_background": True})
    operation, kwargs = spec.plan(args)
    assert operation == "spawn"
    assert set(kwargs) <= set(OPERATIONS["spawn"].parameter_names)
    assert spec.plan(spec.args.model_validate({"command": "true"}))[0] == "execute"


@pytest.mark.parametrize("spec", SPECS, ids=lambda spec: spec.name)
def test_sandbox_tools_methods_take_the_tool_arguments(spec: ToolSpec) -> None:
    method = getattr(SandboxTools, spec.name)
    fields = spec.args.model_fields
    assert [p.name for p in params(method)] == list(fields)
    for parameter in params(method):
        info = fields[parameter.name]
        if info.is_required():
            assert parameter.default is inspect.Parameter.empty
        else:
            assert parameter.default == info.default, (spec.name, parameter.name)


def _commands() -> list[tuple[str, Callable[..., Any], commands.Runs]]:
    found = []
    for module in (commands, processes):
        for name in dir(module):
            fn = getattr(module, name)
            runs = getattr(fn, "runs", None)
            if (
                callable(fn)
                and isinstance(runs, commands.Runs)
                and fn.__module__ == module.__name__
            ):
                found.append((name, fn, runs))
    return found


def test_the_cli_runs_every_operation_but_the_bytes_ones() -> None:
    ran = {runs.operation for _, _, runs in _commands()}
    # read_bytes and write_bytes are `read --raw` and `write --from-file`/stdin; `exec`
    # streams (execute_stream takes execute's parameters, checked below).
    # end_processes is what `release` does first where a release keeps processes.
    assert ran == set(OPERATIONS) - {"read_bytes", "write_bytes", "execute", "end_processes"}
    assert OPERATIONS["execute"].parameters == OPERATIONS["execute_stream"].parameters


@pytest.mark.parametrize("command", _commands(), ids=lambda c: c[0])
def test_each_cli_command_maps_onto_its_operation(
    command: tuple[str, Callable[..., Any], commands.Runs],
) -> None:
    name, fn, runs = command
    op = OPERATIONS[runs.operation]
    runtime = {p.name: p for p in op.parameters}
    options = params(fn)[1:]  # after the session
    covered = set()
    for option in options:
        if option.name in runs.extras:
            continue
        target = runs.aliases.get(option.name, option.name)
        assert target in runtime, f"sandkit {name}: --{option.name} is no parameter of {op.name}"
        covered.add(target)
        wanted = runtime[target].default
        if wanted is inspect.Parameter.empty:
            continue
        # The CLI's own spelling of a default (e.g. --mode content) must mean the same.
        if target == "output_mode":
            assert commands.GREP_MODES[option.default] == wanted
        else:
            assert option.default == wanted, f"sandkit {name}: default of --{option.name}"
    for target, parameter in runtime.items():
        if target not in covered:
            assert parameter.default is not inspect.Parameter.empty, (name, target)


def test_langchain_tools_carry_the_tool_schemas() -> None:
    pytest.importorskip("langchain_core")
    from sandkit import Settings
    from sandkit.integrations.langchain import sandkit_tools
    from sandkit.local import LocalProvider
    from sandkit.tools.specs import input_schema

    provider = LocalProvider(Settings(data_root="/nonexistent-never-created", execute_enabled=True))
    tools = {tool.name: tool for tool in sandkit_tools(provider)}
    assert set(tools) == {spec.name for spec in SPECS}
    for spec in SPECS:
        assert tools[spec.name].args_schema == input_schema(spec, provider.limits)


def test_deepagents_backend_matches_the_protocol() -> None:
    pytest.importorskip("deepagents")
    from deepagents.backends.protocol import SandboxBackendProtocol

    from sandkit.integrations.deepagents import SandkitBackend

    for name, member in inspect.getmembers(SandboxBackendProtocol, inspect.isfunction):
        if name.startswith("_"):
            continue
        ours = getattr(SandkitBackend, name)
        if ours is member:
            continue  # inherited as deepagents defines it
        theirs = [(p.name, p.kind, p.default) for p in params(member)]
        assert [(p.name, p.kind, p.default) for p in params(ours)] == theirs, name
