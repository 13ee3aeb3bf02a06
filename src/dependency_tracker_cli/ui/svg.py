"""The wait graph as an inline SVG: a layered layout, drawn on the server.

Parents on the left, joins in the middle, what is waited on on the right; a
layer shows at most ``max_per_layer`` nodes and one "+N more" box for the
rest, so a 200-member join stays a picture. Edges between members of a cycle
are red.
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape

from dependency_tracker_cli.waitgraph import FILL, JOIN, WaitGraph

CYCLE_COLOUR = "#e03131"
EDGE_COLOUR = "#868e96"
NODE_WIDTH, NODE_HEIGHT = 220, 34
COLUMN_GAP, ROW_GAP, MARGIN = 120, 14, 10
# Characters of a label drawn in a box (the whole label is in its tooltip).
_LABEL_CHARS = 30
PARENTS, JOINS, PAYLOADS = 0, 1, 2


@dataclass(frozen=True)
class Box:
    """A node's place: its layer (column) and row, and where that is in pixels."""

    node_id: str
    layer: int
    row: int

    @property
    def x(self) -> int:
        """Left edge."""
        return MARGIN + self.layer * (NODE_WIDTH + COLUMN_GAP)

    @property
    def y(self) -> int:
        """Top edge."""
        return MARGIN + self.row * (NODE_HEIGHT + ROW_GAP)


@dataclass(frozen=True)
class Layout:
    """Boxes of the nodes drawn, and how many each layer left out."""

    boxes: dict[str, Box]
    hidden: dict[int, int]

    @property
    def rows(self) -> int:
        """Rows of the tallest layer (its "+N more" box included)."""
        tallest = [box.row + 1 for box in self.boxes.values()]
        tallest += [
            1 + sum(1 for b in self.boxes.values() if b.layer == layer)
            for layer, count in self.hidden.items()
            if count
        ]
        return max(tallest, default=0)


def layer_of(graph: WaitGraph, node_id: str, waiting: set[str]) -> int:
    """Joins in the middle; whoever waits (a parent) on the left; the rest on the right."""
    if graph.nodes[node_id].kind == JOIN:
        return JOINS
    return PARENTS if node_id in waiting else PAYLOADS


def layout(graph: WaitGraph, *, max_per_layer: int = 40) -> Layout:
    """Layered positions, nodes in id order within a layer, the excess of a layer counted."""
    waiting = {edge.source for edge in graph.edges}
    layers: dict[int, list[str]] = {PARENTS: [], JOINS: [], PAYLOADS: []}
    for node_id in sorted(graph.nodes):
        layers[layer_of(graph, node_id, waiting)].append(node_id)
    boxes: dict[str, Box] = {}
    hidden: dict[int, int] = {}
    for layer, members in layers.items():
        for row, node_id in enumerate(members[:max_per_layer]):
            boxes[node_id] = Box(node_id, layer, row)
        hidden[layer] = max(0, len(members) - max_per_layer)
    return Layout(boxes, hidden)


def cycle_edges(graph: WaitGraph) -> set[tuple[str, str]]:
    """(source, target) of the edges inside a cycle."""
    group_of = {node: index for index, group in enumerate(graph.cycles()) for node in group}
    return {
        (edge.source, edge.target)
        for edge in graph.edges
        if edge.source in group_of and group_of[edge.source] == group_of.get(edge.target)
    }


def to_svg(graph: WaitGraph, *, max_per_layer: int = 40) -> str:
    """The graph as one ``<svg>`` element (text, safe to put in HTML as it is)."""
    placed = layout(graph, max_per_layer=max_per_layer)
    red = cycle_edges(graph)
    width = 2 * MARGIN + 3 * NODE_WIDTH + 2 * COLUMN_GAP
    height = 2 * MARGIN + max(1, placed.rows) * (NODE_HEIGHT + ROW_GAP)
    parts = [
        (
            f'<svg xmlns="http://www.w3.org/2000/svg" class="waitgraph" width="{width}" '
            f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
            'aria-label="wait graph">'
        ),
        "<defs>"
        + "".join(
            f'<marker id="arrow-{name}" viewBox="0 0 10 10" refX="10" refY="5" '
            f'markerWidth="7" markerHeight="7" orient="auto-start-reverse">'
            f'<path d="M 0 0 L 10 5 L 0 10 z" fill="{colour}"/></marker>'
            for name, colour in (("grey", EDGE_COLOUR), ("red", CYCLE_COLOUR))
        )
        + "</defs>",
    ]
    for edge in graph.edges:
        start, end = placed.boxes.get(edge.source), placed.boxes.get(edge.target)
        if start is None or end is None:
            continue  # an end in a layer's "+N more"
        in_cycle = (edge.source, edge.target) in red
        parts.append(_edge(start, end, in_cycle=in_cycle, notified=edge.notified))
    for node_id, box in placed.boxes.items():
        node = graph.nodes[node_id]
        state = node.state or ("parent" if node.colour_key == "PARENT" else "no state")
        fill = FILL.get(node.colour_key, FILL["UNKNOWN"])
        label = node.label if len(node.label) <= _LABEL_CHARS else f"…{node.label[-29:]}"
        parts.append(
            f'<g class="node node-{node.kind}" data-id="{escape(node_id)}">'
            f"<title>{escape(node.label)}: {escape(state)}</title>"
            f'<rect x="{box.x}" y="{box.y}" width="{NODE_WIDTH}" height="{NODE_HEIGHT}" '
            f'rx="6" fill="{fill}" stroke="#495057"/>'
            f'<text x="{box.x + 8}" y="{box.y + 14}" font-size="11">{escape(label)}</text>'
            f'<text x="{box.x + 8}" y="{box.y + 28}" font-size="10" fill="#495057">'
            f"{escape(state)}</text></g>"
        )
    for layer, count in placed.hidden.items():
        if count:
            row = sum(1 for b in placed.boxes.values() if b.layer == layer)
            box = Box("", layer, row)
            parts.append(
                f'<g class="more"><rect x="{box.x}" y="{box.y}" width="{NODE_WIDTH}" '
                f'height="{NODE_HEIGHT}" rx="6" fill="#fff" stroke="#adb5bd" '
                f'stroke-dasharray="4"/><text x="{box.x + 8}" y="{box.y + 21}" '
                f'font-size="11">+{count} more</text></g>'
            )
    parts.append("</svg>")
    return "".join(parts)


def _edge(start: Box, end: Box, *, in_cycle: bool, notified: bool) -> str:
    """A path from ``start``'s right side to ``end``'s left (a bow when in one column)."""
    colour, marker = (CYCLE_COLOUR, "red") if in_cycle else (EDGE_COLOUR, "grey")
    y1, y2 = start.y + NODE_HEIGHT // 2, end.y + NODE_HEIGHT // 2
    if start.layer == end.layer:  # parents waiting on parents (chains, cycles): bow out right
        x = start.x + NODE_WIDTH
        bow = x + 40 + 10 * abs(start.row - end.row)
        d = f"M {x} {y1} C {bow} {y1}, {bow} {y2}, {x} {y2}"
        if start.row == end.row:  # a self-wait: a loop
            d = f"M {x} {y1 - 8} C {x + 40} {y1 - 30}, {x + 40} {y1 + 30}, {x} {y1 + 8}"
    else:
        x1, x2 = start.x + NODE_WIDTH, end.x
        middle = (x1 + x2) // 2
        d = f"M {x1} {y1} C {middle} {y1}, {middle} {y2}, {x2} {y2}"
    dash = ' stroke-dasharray="5 4"' if notified else ""
    kind = "edge cycle" if in_cycle else "edge"
    return (
        f'<path class="{kind}" d="{d}" fill="none" stroke="{colour}" '
        f'stroke-width="{3 if in_cycle else 1.5}"{dash} marker-end="url(#arrow-{marker})"/>'
    )
