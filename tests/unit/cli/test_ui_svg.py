"""The ``ui`` page's graph picture: layers, cycle edges in red, big layers cut short."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from dependency_tracker_cli.ui.svg import (
    CYCLE_COLOUR,
    JOINS,
    PARENTS,
    PAYLOADS,
    cycle_edges,
    layout,
    to_svg,
)
from dependency_tracker_cli.waitgraph import WaitGraph
from tests.unit.cli.rows import join, waiter

SVG = "{http://www.w3.org/2000/svg}"


def test_parents_are_left_joins_between_and_payloads_right() -> None:
    # GIVEN a parent waiting on a payload, and a parent waiting on a join of two
    row, members = join("j1", ["m1", "m2"], parent="joiner")
    graph = WaitGraph.from_rows([waiter("dep", "t1", parent="parent"), row, *members])
    # WHEN it is laid out
    boxes = layout(graph).boxes
    # THEN each node is in its column, and a column's nodes do not overlap
    assert boxes["payload:parent"].layer == PARENTS
    assert boxes["payload:joiner"].layer == PARENTS
    assert boxes["join:j1"].layer == JOINS
    assert {boxes[f"payload:{n}"].layer for n in ("dep", "m1", "m2")} == {PAYLOADS}
    assert boxes["payload:parent"].x < boxes["join:j1"].x < boxes["payload:dep"].x
    column = sorted(box.y for box in boxes.values() if box.layer == PAYLOADS)
    assert len(set(column)) == 3


def test_cycle_edges_are_red_and_the_others_are_not() -> None:
    # GIVEN a and b waiting on each other, and c waiting on a (outside the cycle)
    rows = [waiter("b", "t1", parent="a"), waiter("a", "t2", parent="b")]
    graph = WaitGraph.from_rows([*rows, waiter("a", "t3", parent="c")])
    assert cycle_edges(graph) == {("payload:a", "payload:b"), ("payload:b", "payload:a")}
    # WHEN it is drawn
    root = ET.fromstring(to_svg(graph))  # noqa: S314  (our own output)
    # THEN the two cycle edges are red, the third grey
    paths = root.findall(f"{SVG}path[@class]")
    red = [p for p in paths if p.get("stroke") == CYCLE_COLOUR]
    assert len(red) == 2
    assert all(p.get("class") == "edge cycle" for p in red)
    assert len(paths) == 3
    # AND every node has its label and a tooltip with its state
    titles = {t.text for t in root.iter(f"{SVG}title")}
    assert titles == {"a: no state", "b: no state", "c: no state"}


def test_a_big_layer_shows_some_nodes_and_counts_the_rest() -> None:
    # GIVEN a join of 200 members
    row, members = join("big", [f"m{i:03d}" for i in range(200)], parent="p")
    graph = WaitGraph.from_rows([row, *members])
    # WHEN it is drawn with 40 nodes a column
    text = to_svg(graph, max_per_layer=40)
    # THEN 40 members are drawn, and a box says how many are not
    assert len(re.findall(r'class="node node-payload"', text)) == 40 + 1  # and the parent
    assert "+160 more" in text
    assert text.count('class="edge"') == 1 + 40
