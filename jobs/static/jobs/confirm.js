// Forms with data-confirm ask before they are sent (run now, pause, delete). One listener on
// the document, so a form the live page swapped in (jobs/static/jobs/live.js) asks too.
(function () {
  "use strict";
  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (form instanceof HTMLFormElement && form.dataset.confirm && !window.confirm(form.dataset.confirm)) {
      event.preventDefault();
    }
  });
})();
