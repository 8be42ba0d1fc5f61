/*
 * The navbar's page links keep the step: from the reward page at step 20, "Responses" opens step 20 (and
 * back), not the run's last step. The shell builds the links with the run only, and cannot know the step:
 * a page writes its own URL (dcc.Location with refresh=False) without telling the shell's Location. So the
 * step is added here, at click time, from the address bar: only between pages that take a step, only for
 * a step number (not "all") of the same run. The navigation is then what dcc.Link does (history.pushState,
 * then the event dcc.Location listens for). A click with a modifier key is left to the browser.
 */
(function () {
  var STEP_PAGES = ["/reward", "/responses"];

  function takesStep(pathname) {
    return STEP_PAGES.some(function (p) {
      return pathname.endsWith(p); // behind a URL prefix too
    });
  }

  document.addEventListener(
    "click",
    function (event) {
      var link = event.target && event.target.closest ? event.target.closest("a[id^='app-nav-']") : null;
      if (!link || event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) {
        return;
      }
      var here = new URLSearchParams(window.location.search);
      var step = here.get("step");
      var target = new URL(link.href, window.location.href);
      if (
        !step ||
        !/^-?\d+$/.test(step) ||
        !takesStep(window.location.pathname) ||
        !takesStep(target.pathname) ||
        !target.searchParams.get("run") ||
        target.searchParams.get("run") !== here.get("run")
      ) {
        return;
      }
      target.searchParams.set("step", step);
      event.preventDefault();
      event.stopPropagation();
      window.history.pushState({}, "", target.pathname + target.search);
      window.dispatchEvent(new CustomEvent("_dashprivate_pushstate"));
      window.scrollTo(0, 0);
    },
    true
  );
})();
