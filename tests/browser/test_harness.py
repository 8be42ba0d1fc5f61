"""Proves the browser harness: Chromium starts, Dash serves the vendored Bootstrap and icon font from
assets/, callbacks run, and the page makes no request outside the app server.
"""

import dash
import dash_bootstrap_components as dbc
import pytest
from dash import Input, Output, html

SCREENSHOT = "/tmp/harness.png"

# Resolve a promise in the page and hand its result back to selenium.
ICON_FONT_STATUS_JS = """
const done = arguments[arguments.length - 1];
document.fonts.load('1em bootstrap-icons')
  .then(() => document.fonts.ready)
  .then(() => done([...document.fonts].filter(f => f.family.replace(/"/g, '') === 'bootstrap-icons')
                                       .map(f => f.status)))
  .catch(e => done(['error: ' + e]));
"""


def make_app(assets_dir):
    app = dash.Dash(__name__, assets_folder=str(assets_dir))
    app.layout = dbc.Container(
        [
            dbc.Button(
                [html.I(className="bi bi-play-fill me-1", id="harness-icon"), "Run"], id="harness-btn"
            ),
            html.Div("not clicked", id="harness-out", className="token-strip"),
        ],
        className="p-3",
    )

    # app.callback, not dash.callback: keeps this callback out of the global registry that pages use.
    @app.callback(
        Output("harness-out", "children"), Input("harness-btn", "n_clicks"), prevent_initial_call=True
    )
    def on_click(n_clicks):
        return f"clicked {n_clicks}"

    return app


@pytest.mark.browser
def test_harness001_bootstrap_served_locally(dash_duo, assets_dir):
    """Bootstrap CSS, the icon font and app.css come from assets/; a callback round trip works."""
    dash_duo.start_server(make_app(assets_dir))
    dash_duo.wait_for_text_to_equal("#harness-out", "not clicked")

    def computed(selector, prop, pseudo=None):
        return dash_duo.driver.execute_script(
            "return getComputedStyle(document.querySelector(arguments[0]), arguments[2])[arguments[1]];",
            selector,
            prop,
            pseudo,
        )

    # Bootstrap's primary blue: bootstrap.min.css was linked and applied. Checked before the click,
    # which leaves the button in its (transitioning) hover/focus colour.
    assert computed("#harness-btn", "backgroundColor") == "rgb(13, 110, 253)"
    # app.css applied, including a Bootstrap override despite loading before bootstrap.min.css.
    assert computed("#harness-out", "whiteSpace") == "pre-wrap"
    assert computed("body", "backgroundColor") == "rgb(246, 247, 249)"
    # The icon font resolved relative to its CSS and loaded.
    assert "bootstrap-icons" in computed("#harness-icon", "fontFamily", "::before")
    assert dash_duo.driver.execute_async_script(ICON_FONT_STATUS_JS) == ["loaded"]

    dash_duo.find_element("#harness-btn").click()
    dash_duo.wait_for_text_to_equal("#harness-out", "clicked 1")

    # Each stylesheet linked exactly once, and every resource came from the app server.
    hrefs = dash_duo.driver.execute_script(
        "return [...document.querySelectorAll('link[rel=stylesheet]')].map(l => l.getAttribute('href'));"
    )
    paths = [h.split("?")[0] for h in hrefs]
    assert sorted(paths) == sorted(set(paths))
    assert {p for p in paths if p.endswith(".css")} >= {
        "/assets/app.css",
        "/assets/vendor/bootstrap/bootstrap.min.css",
        "/assets/vendor/bootstrap-icons/bootstrap-icons.min.css",
    }
    resources = dash_duo.driver.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name);"
    )
    assert resources and all(url.startswith(dash_duo.server_url) for url in resources), resources

    dash_duo.driver.save_screenshot(SCREENSHOT)
    assert dash_duo.get_logs() == []
