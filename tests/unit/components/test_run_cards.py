"""The runs page's pieces built from what the board understood of a run."""

from __future__ import annotations

from dash import html

from components.run_cards import mapping_block


def test_runcards001_mapping_is_text_to_copy():
    """The mapping is one text in a pre (a path that looks like markup stays text), what could not be
    mapped a list item each, under ids named by the run."""
    toml = '[fields]\nprompt = "<script>alert(1)</script>"\n'
    block = mapping_block("r", toml, ["group: none named", "step: none in 1 file"])
    pre, items = block.children[1], block.children[2]
    assert isinstance(pre, html.Pre) and pre.children == toml and pre.id == "runs-mapping-r"
    assert items.id == "runs-unmapped-r" and [li.children for li in items.children] == [
        "group: none named",
        "step: none in 1 file",
    ]
