"""bootserver.renders.RenderCache: an answer rendered once per change of its inputs, one slot per node."""

from __future__ import annotations

from bootserver.renders import RenderCache


def test_an_answer_is_rendered_again_only_when_its_inputs_change() -> None:
    made: list[tuple[str, int]] = []

    def render(inputs: tuple[str, int]) -> str:
        made.append(inputs)
        return f"{inputs[0]}:{inputs[1]}"

    cache: RenderCache[tuple[str, int], str] = RenderCache(render)
    assert cache.get("n0", ("a", 1)) == "a:1"
    assert cache.get("n0", ("a", 1)) == "a:1"
    assert cache.get("n1", ("a", 1)) == "a:1"  # another node: its own slot
    assert cache.get("n0", ("a", 2)) == "a:2"
    assert cache.get("n0", ("a", 1)) == "a:1"  # one slot per node: the older inputs were replaced
    assert made == [("a", 1), ("a", 1), ("a", 2), ("a", 1)]
