// Live job and run pages (issue 28): while something can change - a run going, an active job
// that may start one - the page asks the server for itself again and swaps in each part marked
// data-live-part (by id) that changed, as the order page swaps in its timeline (orders/static/
// orders/status.js). `#live-root[data-live]` says how often: "fast" (a run is going: every 2 s),
// "slow" (an active job: every 10 s) or "off" (nothing will change: it stops); each fresh page
// says it again. No inline script (the Content-Security-Policy allows static files only); the
// fragments are our own server's markup, every data text in it escaped when it was drawn, parsed
// with DOMParser, never assigned as a string to innerHTML. A part the person is using is kept:
// an unchanged part is not replaced (a note typed in the pause form stays), an open <details>
// stays open.
(function () {
  "use strict";
  var root = document.getElementById("live-root");
  if (!root || !window.fetch || !window.DOMParser) return;
  var PERIOD = { fast: 2000, slow: 10000 };
  var timer = null;

  function indicator(mode) {
    var live = document.getElementById("live");
    if (live) live.classList.toggle("hidden", !PERIOD[mode]);
  }

  function schedule(delay) {
    window.clearTimeout(timer);
    var mode = root.dataset.live;
    indicator(mode);
    if (!PERIOD[mode]) return;
    timer = window.setTimeout(poll, delay || PERIOD[mode]);
  }

  function openDetails(part) {
    var open = [];
    part.querySelectorAll("details[open]").forEach(function (d, i) { open.push(i); });
    return open;
  }

  function swap(fresh) {
    fresh.querySelectorAll("[data-live-part]").forEach(function (part) {
      var current = part.id ? document.getElementById(part.id) : null;
      if (!current) return;
      var kept = openDetails(current);
      current.querySelectorAll("details[open]").forEach(function (d) { d.removeAttribute("open"); });
      if (current.outerHTML === part.outerHTML) {
        reopen(current, kept);
        return;
      }
      var node = document.importNode(part, true);
      current.replaceWith(node);
      reopen(node, kept);
    });
  }

  function reopen(part, indexes) {
    var all = part.querySelectorAll("details");
    indexes.forEach(function (i) { if (all[i]) all[i].setAttribute("open", ""); });
  }

  function poll() {
    if (document.hidden) {
      schedule();
      return;
    }
    fetch(window.location.href, { credentials: "same-origin", cache: "no-store", headers: { Accept: "text/html" } })
      .then(function (response) {
        if (!response.ok) throw new Error("status " + response.status);
        return response.text();
      })
      .then(function (html) {
        var fresh = new DOMParser().parseFromString(html, "text/html").getElementById("live-root");
        if (!fresh) throw new Error("not the page (signed out?)");
        swap(fresh);
        root.dataset.live = fresh.dataset.live || "off";
        schedule();
      })
      .catch(function () { schedule(PERIOD.slow * 3); });
  }

  document.addEventListener("visibilitychange", function () {
    if (!document.hidden && PERIOD[root.dataset.live]) schedule(100);
  });
  schedule();
})();
