// A long run's page: poll /api/runs/<id>/progress/ (the signed-in user's session) and move the
// progress bar, the counts, the speed and the time left; stop once the run is finished.
(function () {
  "use strict";
  var config = JSON.parse(document.getElementById("progress-config").textContent);
  var bar = document.getElementById("progress");
  var fill = bar.querySelector(".progress-fill");
  var stateBox = document.getElementById("run-state");
  var live = document.getElementById("live");
  var INTERVAL = 500;

  function text(id, value) {
    var el = document.getElementById(id);
    if (el) { el.textContent = value; }
  }

  function seconds(value) {
    if (value === null || value === undefined) { return "—"; }
    if (value < 60) { return value.toFixed(1) + " s"; }
    return Math.floor(value / 60) + " min " + Math.round(value % 60) + " s";
  }

  function render(data) {
    var p = data.paged || {};
    var percent = p.percent || 0;
    fill.style.width = percent + "%";
    bar.setAttribute("aria-valuenow", String(percent));
    bar.dataset.state = data.state;
    text("progress-percent", percent + " %");
    text("pages", (p.pages_done || 0) + " of " + (p.pages_total === null || p.pages_total === undefined ? "?" : p.pages_total));
    text("rows", (p.rows_done || 0).toLocaleString("en") + " of " + (p.rows_total === null || p.rows_total === undefined ? "?" : p.rows_total.toLocaleString("en")));
    text("rate", p.rows_per_second ? Math.round(p.rows_per_second).toLocaleString("en") + " products/s" : "—");
    text("eta", seconds(p.eta_seconds));
    if (stateBox.dataset.state !== data.state) {
      stateBox.dataset.state = data.state;
      stateBox.innerHTML = '<span class="badge badge-' + data.state + '">' + data.state_label + "</span>";
    }
    if (data.terminal) { live.classList.add("hidden"); }
    return data.terminal;
  }

  function poll() {
    fetch(config.url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (data) {
        if (data && render(data)) { return; }
        window.setTimeout(poll, INTERVAL);
      })
      .catch(function () { window.setTimeout(poll, INTERVAL * 4); });
  }
  poll();
})();
