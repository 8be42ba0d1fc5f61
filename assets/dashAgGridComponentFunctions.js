/* Cell renderers for dash-ag-grid (the grid looks them up by name in this object). */
var dagcomponentfuncs = (window.dashAgGridComponentFunctions = window.dashAgGridComponentFunctions || {});

/*
 * AppLink: the cell's value as a link to the app page in the row's field `params.hrefField` (a path we build,
 * never model text). A plain click navigates inside the app, as dcc.Link does (history.pushState, then the
 * event dcc.Location listens for), so the page is not reloaded; a click with a modifier key, or the middle
 * button, opens the link as the browser would (a new tab). The text is rendered as text, never as markup.
 */
dagcomponentfuncs.AppLink = function (props) {
  var href = props.data && props.hrefField ? props.data[props.hrefField] : null;
  var text = props.value === null || props.value === undefined ? "" : String(props.value);
  if (!href) {
    return text;
  }
  return React.createElement(
    "a",
    {
      href: href,
      onClick: function (event) {
        if (event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) {
          return;
        }
        event.preventDefault();
        window.history.pushState({}, "", href);
        window.dispatchEvent(new CustomEvent("_dashprivate_pushstate"));
        window.scrollTo(0, 0);
      },
    },
    text
  );
};

/*
 * MarkedText: the cell's text with the search's matches highlighted, from the row's field
 * `params.marksField`: [piece, matched] pairs computed on the server (data.responses.mark_previews). Every
 * piece is rendered as text (React escapes it), the matched ones inside <mark>; never markup. Without
 * pieces, the cell's value as text.
 */
dagcomponentfuncs.MarkedText = function (props) {
  var pieces = props.data && props.marksField ? props.data[props.marksField] : null;
  var text = props.value === null || props.value === undefined ? "" : String(props.value);
  if (!Array.isArray(pieces) || pieces.length === 0) {
    return text;
  }
  return React.createElement(
    React.Fragment,
    null,
    pieces.map(function (p, i) {
      var piece = String(p[0]);
      return p[1] ? React.createElement("mark", {key: i}, piece) : piece;
    })
  );
};
