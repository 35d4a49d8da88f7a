"""Symbolic values in queue templates are the IR's UOps, resolved at submit with `sym_infer`."""

from __future__ import annotations

import pytest

from tg.codegen import UOp
from tg.hcq import Device, Variable
from tg.hcq.symbolic import concrete, resolve

# how long a wait may go without progress before it fails: generous, a loaded machine can leave the engine thread
# unscheduled for seconds
DEADLINE_MS = 120_000

pytestmark = pytest.mark.timeout(60)


def test_hcq_variable_is_the_ir_variable() -> None:
    assert Variable("n", 1, 8) is UOp.variable("n", 1, 8)


def test_plain_ints_resolve_to_themselves() -> None:
    assert resolve(7, {}) == 7


def test_an_expression_of_variables_resolves_like_python_arithmetic() -> None:
    n, k = Variable("n", 0, 100), Variable("k", 0, 100)
    for n_value, k_value in ((0, 0), (3, 5), (100, 99)):
        assert resolve(n * 4 + k, {"n": n_value, "k": k_value}) == n_value * 4 + k_value


@pytest.mark.parametrize("as_expression", [False, True])
def test_a_missing_variable_names_itself_and_what_var_vals_has(as_expression: bool) -> None:
    n = Variable("n", 0, 10)
    with pytest.raises(KeyError, match=r"no value for variable 'n' \(var_vals has \['k'\]\)"):
        resolve(n + 1 if as_expression else n, {"k": 1})


@pytest.mark.parametrize("as_expression", [False, True])
@pytest.mark.parametrize("value", [-1, 11])
def test_a_value_outside_the_range_is_rejected(value: int, as_expression: bool) -> None:
    n = Variable("n", 0, 10)
    with pytest.raises(ValueError, match=rf"variable n={value} is outside its range \[0, 10\]"):
        resolve(n * 2 if as_expression else n, {"n": value})


def test_a_bound_variable_uses_its_value_unless_var_vals_overrides_it() -> None:
    bound = Variable("n", 1, 10).bind(3)
    assert resolve(bound, {}) == 3
    assert resolve(bound, {"n": 9}) == 9
    with pytest.raises(ValueError, match="outside its range"):
        resolve(bound, {"n": 11})


def test_a_queue_signals_the_value_of_an_expression_at_each_submit() -> None:
    dev = Device["CPU"]
    signal = dev.new_signal(value=0)
    step = Variable("step", 0, 1000)
    queue = dev.hw_compute_queue_t().signal(signal, step * 3 + 1)
    for step_value in (1, 5, 20):
        queue.submit(dev, {"step": step_value})
        signal.wait(step_value * 3 + 1, timeout=DEADLINE_MS)
        assert signal.value == step_value * 3 + 1


def test_submitting_an_out_of_range_value_fails_before_the_queue_runs() -> None:
    dev = Device["CPU"]
    signal = dev.new_signal(value=0)
    queue = dev.hw_compute_queue_t().signal(signal, Variable("v", 0, 10))
    with pytest.raises(ValueError, match=r"variable v=11 is outside its range \[0, 10\]"):
        queue.submit(dev, {"v": 11})
    dev.synchronize()
    assert signal.value == 0


def test_concrete_passes_ints_and_refuses_symbolic_values() -> None:
    assert concrete(12) == 12
    with pytest.raises(TypeError, match="symbolic"):
        concrete(Variable("n", 1, 8) * 4)


def test_commands_sharing_an_expression_resolve_to_its_value_and_are_rebuilt_only_when_it_changes() -> None:
    dev = Device["CPU"]
    first, second = dev.new_signal(value=0), dev.new_signal(value=0)
    n = Variable("n", 0, 100)
    rows = n // 16 + 1  # (a launch size of a graph's attention kernels: many commands, one expression)
    queue = dev.hw_compute_queue_t().signal(first, rows).signal(second, rows * 2)
    resolved = {value: queue.resolve({"n": value}) for value in (3, 5, 17, 0)}
    for value, commands in resolved.items():
        assert [command.value for command in commands] == [value // 16 + 1, (value // 16 + 1) * 2]
    assert all(a is b for a, b in zip(resolved[3], resolved[5], strict=True))  # same values: the same commands
    assert resolved[17][0] is not resolved[5][0]
    with pytest.raises(ValueError, match=r"variable n=101 is outside its range \[0, 100\]"):
        queue.resolve({"n": 101})  # (checked even though the values would not change)
