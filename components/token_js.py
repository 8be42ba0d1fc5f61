"""The token page's browser code: the strip filled from its columnar data (one ``<span>`` per token, text set
with ``textContent`` and the hover with ``title``, so model text never becomes markup; building 4,000 Dash
components per response would cost far more than the 50 ms the server has), its next windows asked for as
it is scrolled, and the hovered position outlined."""

from __future__ import annotations

from components import theme

# ---- browser side --------------------------------------------------------------------------------------

# __STRIP__ stands for the strip's id (see strip_js / highlight_js).
# Fills the strip from strip_data(): textContent and title are plain text, so a token such as
# "<script>" is shown, never parsed. The strip's div carries data-key: a re-render may mount a new div
# after this runs, so it waits (a few frames) for the div of this very data.
STRIP_JS = r"""
(function() {
function strip(store) {
    if (!store || !store.json) { return window.dash_clientside.no_update; }
    var data = JSON.parse(store.json);
    var first = !data.start;
    var shown = document.querySelector('#__STRIP__[data-key="' + store.key + '"]');
    if (first && shown && shown.__filledKey === store.key) {
        // The first window, filled already as the strip mounted (below), which said so too.
        return shown.__doneSent ? window.dash_clientside.no_update : store.key + ':0';
    }
    if (first && window.performance && performance.mark) { performance.mark('tokens-strip-data'); }
    var tries = 0;
    function tip(d, i) {
        var t = 'position ' + d.pos[i] + ' · token "' + d.raw[i] + '"' + (d.pad[i] ? ' · pad' : '')
            + (d.masked && d.masked[i] ? ' · dropped by the loss mask' : '');
        if (d.touched && d.touched[i]) { t += ' · clipped or masked by the correction in the URL'; }
        for (var j = 0; j < d.labels.length; j++) {
            var v = d.values[j][i];
            t += '\n' + d.labels[j] + ': ' + (v === null ? '–' : v);
        }
        return t;
    }
    function fill() {
        var root = document.querySelector('#__STRIP__[data-key="' + store.key + '"]');
        if (!root) {
            if (tries++ < 300) { window.requestAnimationFrame(fill); }
            return;
        }
        if (first && root.__filledKey === store.key) { return; }  // filled as it mounted
        var loaded = first ? 0 : +(root.getAttribute('data-rendered') || 0);
        if (!first && data.start !== loaded) { return; }  // not the window that follows: an old answer
        var frag = document.createDocumentFragment();
        var n = data.text.length;
        for (var i = 0; i < n; i++) {
            var s = document.createElement('span');
            s.textContent = data.text[i];
            s.setAttribute('data-w', data.start);
            s.setAttribute('data-i', i);
            s.setAttribute('data-pos', data.pos[i]);
            var c = data.colour[i];
            if (c !== null) {
                s.style.backgroundColor = data.bg[c];
                if (data.fg[c]) { s.style.color = data.fg[c]; }
            }
            if (data.pad[i]) { s.className = 'token-pad'; }
            if (data.masked && data.masked[i]) { s.classList.add('token-masked'); }
            if (data.touched && data.touched[i]) {
                // Below the token's background, in the page's text colour: seen on any colour of the scale.
                s.style.textDecoration = 'underline wavy 2px __OUTLINE__';
                s.style.textUnderlineOffset = '3px';
                s.setAttribute('data-touched', '1');
            }
            frag.appendChild(s);
        }
        if (first) {
            root.replaceChildren(frag);
            root.__windows = {};
            root.__filledKey = store.key;
        } else {
            root.appendChild(frag);
        }
        root.__windows[data.start] = data;
        // The hover text is written when a token is first hovered: 4,000 ten-line titles up front cost
        // more than the spans themselves.
        root.onmouseover = function(e) {
            var s = e.target;
            if (s.parentNode === root && !s.title) {
                s.title = tip(root.__windows[+s.getAttribute('data-w')], +s.getAttribute('data-i'));
            }
        };
        var done = data.start + n;
        root.setAttribute('data-rendered', String(done));
        root.setAttribute('data-total', String(data.total));
        var status = document.getElementById('__STATUS__');
        if (status) {
            status.textContent = done < data.total
                ? done.toLocaleString('en') + ' of ' + data.total.toLocaleString('en')
                    + ' tokens shown: scroll the strip for more.'
                : '';
        }
        // The next window when the strip is scrolled near its end (or at once, when it does not fill its box).
        root.__pending = false;
        root.__more = function(upto) {
            if (root.__pending || done >= data.total) { return; }
            root.__pending = true;
            window.dash_clientside.set_props('__WANT__',
                {data: {key: store.key, start: done, upto: upto === undefined ? null : upto}});
        };
        root.onscroll = done < data.total ? function() {
            if (root.scrollTop + root.clientHeight >= root.scrollHeight - 400) { root.__more(); }
        } : null;
        if (done < data.total && root.scrollHeight <= root.clientHeight) { root.__more(); }
        // A chart's point hovered beyond the tokens shown: outline it once its window is here (or, at
        // first, the position the page's URL opens at: pos=).
        var want = window.__tokensHighlight;
        if (first && store.select !== undefined && store.select !== null) {
            want = store.select;
            root.__select = store.select;  // outlined again when a chart's hover leaves
        }
        if (want !== undefined && want !== null) {
            var el = root.querySelector('span[data-pos="' + want + '"]');
            if (el) {
                window.__tokensHighlight = null;
                el.classList.add('token-hl');
                el.style.outline = '2px solid __OUTLINE__';
                root.scrollTop = Math.max(0, el.offsetTop - root.offsetTop - root.clientHeight / 2);
            }
        }
        if (first && window.performance && performance.mark) { performance.mark('tokens-strip-filled'); }
    }
    fill();
    return store.key + ':' + data.start;
}
// The first window is drawn as soon as the strip's div is in the page: its data is in the layout Dash
// has just rendered (dash_component_api.getLayout), and the callback above ran 150-200 ms later, after
// the renderer's own rounds over the new layout. It then says the strip is in (__DONE__, which the charts
// wait for) itself; the callback finds the strip filled and does nothing. Installed once, when the page's
// scripts run.
if (window.MutationObserver && !window['__rlbStripWatch:__STRIP__']) {
    window['__rlbStripWatch:__STRIP__'] = true;
    new MutationObserver(function() {
        var root = document.getElementById('__STRIP__');
        var key = root && root.getAttribute('data-key');
        var api = window.dash_component_api;
        if (!key || root.__filledKey === key || !api || !api.getLayout) { return; }
        var c;
        try { c = api.getLayout('__DATA__'); } catch (e) { return; }
        var store = c && (c.props ? c.props.data : c.data);
        if (!store || store.key !== key) { return; }
        strip(store);
        var dc = window.dash_clientside;
        if (root.__filledKey === key && dc && dc.set_props) {
            root.__doneSent = true;
            dc.set_props('__DONE__', {data: key + ':0'});
        }
    }).observe(document.documentElement, {childList: true, subtree: true});
}
return strip;
})()
"""

# Highlights the strip token of the chart point under the mouse (charts' x is the position) and scrolls
# the strip, not the page, to it.
HIGHLIGHT_JS = r"""
function(hovers) {
    var ctx = window.dash_clientside.callback_context;
    var root = document.getElementById('__STRIP__');
    if (!root) { return window.dash_clientside.no_update; }
    var old = root.querySelector('span.token-hl');
    if (old) { old.classList.remove('token-hl'); old.style.outline = ''; }
    var hit = ctx.triggered && ctx.triggered.length ? ctx.triggered[0].value : null;
    if (!hit || !hit.points || !hit.points.length) {
        // No chart hovered: the position the page was opened at (pos=) stays outlined.
        var at = root.__select === undefined ? null : root.querySelector('span[data-pos="' + root.__select + '"]');
        if (at) { at.classList.add('token-hl'); at.style.outline = '2px solid __OUTLINE__'; }
        return null;
    }
    var pos = hit.points[0].x;
    var el = root.querySelector('span[data-pos="' + pos + '"]');
    if (!el) {
        // Beyond the tokens shown: ask for the windows up to it (the strip outlines it when they come).
        if (root.__more) { window.__tokensHighlight = pos; root.__more(pos); }
        return null;
    }
    el.classList.add('token-hl');
    el.style.outline = '2px solid __OUTLINE__';
    var top = el.offsetTop - root.offsetTop;
    if (top < root.scrollTop || top > root.scrollTop + root.clientHeight - 20) {
        root.scrollTop = Math.max(0, top - root.clientHeight / 2);
    }
    return pos;
}
"""


def strip_js(
    strip_id: str, want_id: str = "", status_id: str = "", data_id: str = "", done_id: str = ""
) -> str:
    """:data:`STRIP_JS` for the strip element ``strip_id`` (a clientside callback: strip data in, key out;
    marks ``tokens-strip-data`` / ``tokens-strip-filled`` in the browser's performance timeline when the
    first window is in). It asks for the next window by setting the store ``want_id`` to ``{"key", "start",
    "upto"}`` and says how many tokens are shown in the element ``status_id``. ``data_id``: the store of the
    first window, drawn from the page's layout as soon as the strip's element mounts, which then sets the
    store ``done_id`` (the first window's callback output) itself."""
    return (
        STRIP_JS.replace("__STRIP__", strip_id)
        .replace("__WANT__", want_id)
        .replace("__STATUS__", status_id)
        .replace("__DATA__", data_id)
        .replace("__DONE__", done_id)
        .replace("__OUTLINE__", theme.TEXT)
    )


def highlight_js(strip_id: str) -> str:
    """:data:`HIGHLIGHT_JS` for the strip element ``strip_id`` (charts' hoverData in, hovered position out)."""
    return HIGHLIGHT_JS.replace("__STRIP__", strip_id).replace("__OUTLINE__", theme.TEXT)
