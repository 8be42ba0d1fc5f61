"""Call a page's Dash callback through the Flask test client, as the browser's renderer does, and read its
answer: how the API's tests compare a view's JSON with what the page shows (the same request a browser
sends, the same JSON the renderer receives)."""

from __future__ import annotations

from typing import Any

from api.answer import figure_traces


def callback_key(app, output: str) -> str:
    """The callback_map key of the one callback that has ``output`` (``"id.prop"``) among its outputs."""
    keys = [k for k in app.callback_map if output in _outputs(k)]
    assert len(keys) == 1, (output, keys)
    return keys[0]


def _outputs(key: str) -> list[str]:
    # "..a.figure...b.children.." (several outputs) or "a.figure" (one)
    if key.startswith(".."):
        return [o for o in key.strip(".").split("...") if o]
    return [key]


def call(client, app, output: str, values: dict[str, Any], triggered: str | None = None) -> dict[str, dict]:
    """POST the callback that writes ``output`` with its inputs and states taken from ``values``
    (``{"id.prop": value}``; missing ones are None) and return its answer ``{id: {prop: value}}`` (a
    prevented update: ``{}``). ``triggered``: the input that changed (default: its first input)."""
    key = callback_key(app, output)
    spec = app.callback_map[key]

    def items(deps):
        out = []
        for d in deps:
            name = f"{d['id']}.{d['property']}"
            out.append({"id": d["id"], "property": d["property"], "value": values.get(name)})
        return out

    inputs = items(spec["inputs"])
    outs = [dict(zip(("id", "property"), o.rsplit(".", 1), strict=True)) for o in _outputs(key)]
    body = {
        "output": key,
        "outputs": outs if key.startswith("..") else outs[0],
        "inputs": inputs,
        "state": items(spec["state"]),
        "changedPropIds": [triggered or f"{inputs[0]['id']}.{inputs[0]['property']}"],
    }
    r = client.post("/_dash-update-component", json=body)
    if r.status_code == 204:
        return {}
    assert r.status_code == 200, (r.status_code, r.get_data(as_text=True)[:500])
    return r.get_json()["response"]


def shown_traces(response: dict, cid: str, prop: str = "figure") -> list[dict]:
    """The traces of figure ``cid`` in a callback's answer, as api.answer.figure_traces reads them."""
    return figure_traces(response[cid][prop])


def component(tree: Any, cid: str) -> dict | None:
    """The component with id ``cid`` in a layout as JSON (``{"type", "namespace", "props"}``), or None."""
    if isinstance(tree, dict):
        props = tree.get("props") if "props" in tree else None
        if props is not None and props.get("id") == cid:
            return tree
        for v in (props or tree).values():
            hit = component(v, cid)
            if hit is not None:
                return hit
    elif isinstance(tree, list):
        for v in tree:
            hit = component(v, cid)
            if hit is not None:
                return hit
    return None


def text(tree: Any) -> str:
    """The text a component shows (its children's strings, joined)."""
    if tree is None:
        return ""
    if isinstance(tree, str | int | float):
        return str(tree)
    if isinstance(tree, list):
        return "".join(text(t) for t in tree)
    if isinstance(tree, dict):
        return text((tree.get("props") or {}).get("children"))
    return ""
