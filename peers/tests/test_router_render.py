"""render() shows patterns whose "@type" is itself an operator (router rows: released or modified)."""

from amqp_conformance.peers.frames import render
from amqp_conformance.peers.matching import mismatches


def test_render_a_pattern_with_an_operator_as_type():
    pattern = {"settled": True, "state": {"@type": {"@one-of": ["released", "modified"]}}}
    assert render(pattern) == "{settled=True state={@type={@one-of=[released, modified]}}}"
    lines = mismatches(pattern, {"settled": True, "state": {"@type": "accepted"}})
    assert lines == ["state.@type: expected one of [released, modified], observed accepted"]
    rejected = {"@type": "rejected", "error": {"@type": "error", "condition": "x"}}
    assert render(rejected) == "rejected{error=error{condition=x}}"
