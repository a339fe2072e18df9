"""A scenario's fabric drawn in tiers (``labkit inspect --html``): upper routers, leaves,
hosts and NVLink switches, the bottleneck links standing out, ports, addresses and rates on
hover."""

from __future__ import annotations

import plotly.graph_objects as go

from labkit.analysis.describe import KIND_NAMES, kind_text, rate_text
from labkit.ui.plots.theme import themed

NODE_COLORS = {"gpu": "#0072B2", "storage": "#E69F00", "router": "#000000",
               "nvswitch": "#009E73"}


LINK_STYLES = {"bottleneck": ("bottleneck link", "#D55E00", 4, "solid"),
               "link": ("link", "#999999", 2, "solid"), "nvlink": ("NVLink", "#009E73", 2, "dot")}


def fabric_map(desc: dict) -> go.Figure:
    """A scenario's fabric (:func:`labkit.analysis.describe.fabric`) in tiers: upper
    routers, leaves, hosts (NVLink switches below their GPUs); bottleneck links stand out,
    and hovering shows ports, addresses and rates."""
    pos = _tiers(desc["nodes"])
    scale = desc["scale_factor"]
    fig = go.Figure()
    for style, (name, color, width, dash) in LINK_STYLES.items():
        links = [k for k in desc["links"] if style == (
            "bottleneck" if k["bottleneck"] else "nvlink" if k["kind"] == "nvlink" else "link")]
        if not links:
            continue
        ends = [[pos[e["node"]] for e in k["ends"]] for k in links]
        fig.add_scatter(x=[p[0] for a, b in ends for p in (a, b, (None, None))],
                        y=[p[1] for a, b in ends for p in (a, b, (None, None))],
                        mode="lines", name=name, hoverinfo="skip",
                        line={"color": color, "width": width, "dash": dash})
        fig.add_scatter(x=[(a[0] + b[0]) / 2 for a, b in ends],
                        y=[(a[1] + b[1]) / 2 for a, b in ends], mode="markers",
                        showlegend=False, marker={"size": 14, "color": color, "opacity": 0},
                        hovertext=[_link_hover(k, scale) for k in links], hoverinfo="text")
    for kind, color in NODE_COLORS.items():
        nodes = [n for n in desc["nodes"] if (n["role"] or n["kind"]) == kind]
        if not nodes:
            continue
        fig.add_scatter(x=[pos[n["name"]][0] for n in nodes],
                        y=[pos[n["name"]][1] for n in nodes], mode="markers+text",
                        name=KIND_NAMES[kind], text=[n["name"] for n in nodes],
                        textposition="top center" if kind == "router" else "bottom center",
                        marker={"size": 18 if kind == "router" else 14, "color": color,
                                "symbol": "square" if kind == "router" else "circle"},
                        hovertext=[_node_hover(n) for n in nodes], hoverinfo="text")
    alike: dict[str, list[str]] = {}  # bottlenecks of one rate and buffer together
    for b in desc["bottlenecks"]:
        alike.setdefault(f"{rate_text(b['rate_mbps'], scale)}, {b['buffer_kb']} KiB buffer",
                         []).append(b["link"])
    sub = " · ".join([desc["file"], f"{len(desc['nodes'])} nodes, {len(desc['links'])} links",
                      *(f"bottleneck {', '.join(names)}: {what}" for what, names in alike.items())])
    themed(fig, f"Fabric of {desc['scenario']}", sub, "", "")
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return fig.update_layout(hovermode="closest", hoverlabel={"align": "left"})


def _tiers(nodes: list[dict]) -> dict[str, tuple[float, float]]:
    """Where each node is drawn: ``y`` its level; hosts in a row grouped by router, a leaf
    or NVLink switch above or below its hosts, other routers spread over the width."""
    hosts = [n for n in nodes if n["kind"] == "host"]
    order = [n["name"] for n in nodes if n["kind"] == "router"]
    row = sorted(hosts, key=lambda n: order.index(n["router"]))
    pos, x = {}, 0.0
    for before, n in zip([None, *row], row, strict=False):
        if before:  # a wider gap between two routers' hosts
            x += 1.0 if n["router"] == before["router"] else 1.6
        pos[n["name"]] = (x, 0.0)
    levels: dict[int, list[dict]] = {}
    for n in nodes:
        if n["kind"] != "host":
            levels.setdefault(n["level"], []).append(n)
    for level, group in levels.items():
        for i, n in enumerate(group):
            under = [pos[h["name"]][0] for h in hosts if n["name"] in (h["router"], h["server"])]
            pos[n["name"]] = (sum(under) / len(under) if under else
                              x * (i + 0.5) / len(group), float(level))
    return pos


def _link_hover(link: dict, scale: float) -> str:
    a, b = link["ends"]
    return (f"<b>{link['name']}</b>{' · bottleneck' if link['bottleneck'] else ''}<br>"
            f"{a['ifname']} {a['address']} ↔ {b['ifname']} {b['address']}<br>"
            f"{rate_text(link['rate_mbps'], scale)} · MTU {link['mtu']} · "
            f"buffer {link['buffer_kb']} KiB per port"
            + (f" · loses {link['loss_percent']:g} %" if link["loss_percent"] else ""))


def _node_hover(node: dict) -> str:
    return f"<b>{node['name']}</b> · {kind_text(node)}<br>" + "<br>".join(
        f"{p['ifname']} {p['address']} → {p['peer']}" for p in node["ports"])
