// Live status of one order: polls the status endpoint every second until the run is terminal,
// and redraws the banner, the progress, the steps (with each failed attempt's reason), the state
// badge and the event log. No framework; text only (no innerHTML with data), so nothing a remote
// service says can inject markup.
(function () {
  "use strict";
  var config = JSON.parse(document.getElementById("status-config").textContent);
  var initial = JSON.parse(document.getElementById("status-initial").textContent);
  var POLL_MS = 1000;

  function el(tag, attrs, children) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (key) {
      if (key === "text") node.textContent = attrs[key];
      else node.setAttribute(key, attrs[key]);
    });
    (children || []).forEach(function (child) { if (child) node.appendChild(child); });
    return node;
  }

  function time(iso) {
    if (!iso) return "—";
    var d = new Date(iso);
    return isNaN(d) ? iso : d.toISOString().slice(11, 19);
  }

  function badge(state, label) {
    return el("span", { "class": "badge badge-" + state, text: label });
  }

  function reasons(step) {
    // Every failure with its reason (a later success does not hide earlier failures); repeated
    // ones as one line: "... 17:14–17:15, 18 tries" (attempt_groups, built by the server).
    return el("ol", { "class": "attempts" }, step.attempt_groups.map(function (g) {
      return el("li", { "data-attempt": String(g.first_attempt), "data-tries": String(g.tries), "data-status": g.status }, [
        el("span", { "class": "attempt-n", text: g.label }),
        document.createTextNode(" " + g.reason),
        g.when ? el("span", { "class": "attempt-when", text: " " + g.when }) : null,
      ]);
    }));
  }

  function renderSteps(steps) {
    var body = document.querySelector("#steps tbody");
    var rows = steps.map(function (s) {
      var name = el("td", {}, [
        s.kind === "compensation" ? el("span", { "class": "undo", title: "Compensation", text: "↺ " }) : null,
        document.createTextNode(s.label),
      ]);
      return el("tr", { "data-step": s.name, "data-state": s.state }, [
        name,
        el("td", {}, [badge(s.state, s.state_label)]),
        el("td", { "class": "num", text: String(s.attempts) }),
        el("td", { "class": "mono small", text: time(s.complete_by) }),
        el("td", { "class": "reasons" }, [
          s.deadline && (s.state === "pending" || s.state === "processing")
            ? el("p", {
                "class": "small deadline",
                title: "The step keeps trying, through outages, until then; after that the order is undone.",
                text: "Keeps trying until " + time(s.deadline),
              })
            : null,
          reasons(s),
        ]),
      ]);
    });
    body.replaceChildren.apply(body, rows);
  }

  function renderProgress(p, state) {
    var box = document.getElementById("progress");
    box.dataset.state = state;
    var text = p.done + " of " + p.total + " steps done";
    if (p.to_undo) text += " · " + p.undone + " of " + p.to_undo + " undone";
    box.querySelector(".progress-text").textContent = text;
    box.querySelector(".progress-fill").style.width = (p.total ? Math.round(100 * p.done / p.total) : 0) + "%";
    box.setAttribute("aria-valuemax", String(p.total));
    box.setAttribute("aria-valuenow", String(p.done));
  }

  function renderEvents(events) {
    var list = document.getElementById("events");
    list.replaceChildren.apply(list, events.map(function (e) {
      return el("li", {}, [
        el("time", { text: time(e.at) }),
        document.createTextNode(" "),
        el("span", { "class": "event-type", text: e.type_label }),
        e.step_label ? document.createTextNode(" ") : null,
        e.step_label ? el("span", { text: e.step_label }) : null,
      ]);
    }));
  }

  // The timeline (reports' {% run_timeline %}) is drawn on the server: fetch it again when the
  // steps or the events changed. The fragment is our own server's markup, every data text in it
  // escaped when it was drawn; it is parsed, not assigned as a string to innerHTML.
  var timeline = document.getElementById("timeline");
  function timelineKey(data) {
    return data.events.length + "|" + data.steps.map(function (s) { return s.state + ":" + s.attempts; }).join(",");
  }
  var shownTimeline = timelineKey(initial);
  function refreshTimeline(data) {
    var key = timelineKey(data);
    if (!timeline || !timeline.dataset.url || key === shownTimeline) return;
    shownTimeline = key;
    fetch(timeline.dataset.url, { credentials: "same-origin", cache: "no-store" })
      .then(function (response) {
        if (!response.ok) throw new Error("status " + response.status);
        return response.text();
      })
      .then(function (html) {
        var fresh = new DOMParser().parseFromString(html, "text/html").querySelector(".timeline-body");
        var current = timeline.querySelector(".timeline-body");
        if (fresh && current) current.replaceWith(document.importNode(fresh, true));
      })
      .catch(function () { shownTimeline = null; });
  }

  function render(data) {
    var state = document.getElementById("run-state");
    state.dataset.state = data.state;
    state.replaceChildren(badge(data.state, data.state_label));
    var banner = document.getElementById("banner");
    banner.className = "alert alert-" + data.banner.tone;
    banner.dataset.tone = data.banner.tone;
    banner.textContent = data.banner.text;
    renderProgress(data.progress, data.state);
    renderSteps(data.steps);
    renderEvents(data.events);
    document.getElementById("cancel-form").classList.toggle("hidden", !data.cancellable);
    document.getElementById("live").classList.toggle("hidden", data.terminal);
    refreshTimeline(data);
  }

  function poll() {
    fetch(config.url, { headers: { Accept: "application/json" }, credentials: "same-origin", cache: "no-store" })
      .then(function (response) {
        if (!response.ok) throw new Error("status " + response.status);
        return response.json();
      })
      .then(function (data) {
        render(data);
        if (!data.terminal) window.setTimeout(poll, POLL_MS);
      })
      .catch(function () { window.setTimeout(poll, POLL_MS * 3); });
  }

  var cancel = document.getElementById("cancel-form");
  cancel.addEventListener("submit", function (event) {
    if (!window.confirm(cancel.dataset.confirm)) event.preventDefault();
  });

  render(initial);
  if (!initial.terminal) window.setTimeout(poll, POLL_MS);
})();
