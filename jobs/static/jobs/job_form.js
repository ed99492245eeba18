// The job form: show the fields of the chosen kind (a cron schedule, or once), and a live
// preview of the next fire times while the cron expression, the time zone or the window ("not
// before" / "not after", read in that zone) is typed. The preview asks GET /api/jobs/preview/
// (signed in by the session), 300 ms after the last key, and drops answers to older questions.
(function () {
  "use strict";
  var form = document.getElementById("job-form");
  var preview = document.getElementById("preview");
  var cron = document.getElementById("id_cron");
  var zone = document.getElementById("id_timezone");
  var startAt = document.getElementById("id_start_at");
  var endAt = document.getElementById("id_end_at");
  var text = document.getElementById("preview-text");
  var list = document.getElementById("preview-times");
  var DAYS = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
  var timer = null;
  var asked = 0;
  var controller = null;

  function kind() {
    var checked = form.querySelector("input[name=kind]:checked");
    return checked ? checked.value : "recurring";
  }

  function showKind() {
    var current = kind();
    form.querySelectorAll("[data-kind]").forEach(function (el) {
      el.classList.toggle("hidden", el.dataset.kind !== current);
    });
  }

  // "2026-03-29T03:00:00+02:00" -> "Sun 2026-03-29 03:00 +02:00" (the job's own wall clock).
  function wallClock(iso) {
    var m = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}:\d{2})(?::\d{2}(?:\.\d+)?)?(Z|[+-]\d{2}:\d{2})?$/.exec(iso);
    if (!m) return iso;
    var day = DAYS[new Date(Date.UTC(+m[1], +m[2] - 1, +m[3])).getUTCDay()];
    var offset = !m[5] || m[5] === "Z" ? "+00:00" : m[5];
    return day + " " + m[1] + "-" + m[2] + "-" + m[3] + " " + m[4] + " " + offset;
  }

  function render(state, message, times) {
    preview.dataset.state = state;
    text.textContent = message;
    list.innerHTML = "";
    (times || []).forEach(function (iso) {
      var li = document.createElement("li");
      li.textContent = wallClock(iso);
      li.dataset.time = iso;
      list.appendChild(li);
    });
  }

  function ask() {
    var expression = cron.value.trim();
    if (!expression) {
      render("empty", "Type a cron expression to see when it runs.", []);
      return;
    }
    var mine = ++asked;
    if (controller) controller.abort();
    controller = window.AbortController ? new AbortController() : null;
    var query = { cron: expression, timezone: zone.value.trim() || "UTC", count: "5" };
    if (startAt && startAt.value) query.start_at = startAt.value;
    if (endAt && endAt.value) query.end_at = endAt.value;
    var url = preview.dataset.url + "?" + new URLSearchParams(query).toString();
    preview.dataset.state = "loading";
    fetch(url, {
      credentials: "same-origin",
      headers: { Accept: "application/json" },
      signal: controller ? controller.signal : undefined,
    })
      .then(function (response) {
        return response.json().then(function (body) { return { ok: response.ok, body: body }; });
      })
      .then(function (answer) {
        if (mine !== asked) return; // a newer question is on its way
        if (answer.ok && !answer.body.times.length) {
          render("ok", answer.body.schedule_text + ": no run between the times given.", []);
        } else if (answer.ok) {
          render("ok", answer.body.schedule_text + ":", answer.body.times);
        } else {
          var errors = [];
          ["cron", "timezone", "count", "start_at", "end_at", "detail"].forEach(function (key) {
            var value = answer.body[key];
            if (value) errors.push((key === "detail" ? "" : key + ": ") + [].concat(value).join(" "));
          });
          render("error", errors.join(" · ") || "Cannot preview this schedule.", []);
        }
      })
      .catch(function (error) {
        if (error && error.name === "AbortError") return;
        if (mine === asked) render("error", "Preview unavailable right now.", []);
      });
  }

  function later() {
    window.clearTimeout(timer);
    timer = window.setTimeout(ask, 300);
  }

  // Under the workflow select: what the chosen workflow does, the input it takes and an example
  // input ("use it" copies it into the input box). Only workflows the user may pick are offered.
  var workflow = document.getElementById("id_workflow");
  var hint = document.getElementById("workflow-hint");
  var example = document.getElementById("workflow-example");
  var exampleText = document.getElementById("workflow-example-text");
  var input = document.getElementById("id_input");
  var hints = JSON.parse(document.getElementById("workflow-hints").textContent);
  function showHint() {
    var chosen = hints[workflow.value] || { text: "", example: "" };
    hint.textContent = chosen.text;
    hint.classList.toggle("hidden", !hint.textContent);
    exampleText.textContent = chosen.example;
    example.classList.toggle("hidden", !chosen.example);
  }
  document.getElementById("use-example").addEventListener("click", function () {
    input.value = exampleText.textContent;
  });
  workflow.addEventListener("change", showHint);
  showHint();

  form.querySelectorAll("input[name=kind]").forEach(function (radio) {
    radio.addEventListener("change", function () { showKind(); if (kind() === "recurring") later(); });
  });
  cron.addEventListener("input", later);
  zone.addEventListener("input", later);
  zone.addEventListener("change", later);
  [startAt, endAt].forEach(function (field) {
    if (!field) return;
    field.addEventListener("input", later);
    field.addEventListener("change", later);
  });
  showKind();
  if (cron.value.trim()) ask();
})();
