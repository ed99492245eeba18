// Progress bars drawn by the server: each .progress-fill carries its width in data-percent and
// gets it here, because the Content-Security-Policy (sasproject/middleware.py) refuses style
// attributes in the page. The pages' own scripts move the bars afterwards (status.js,
// catalogue/progress.js) the same way: through the element's style property, which the policy
// allows.
(function () {
  "use strict";
  document.querySelectorAll(".progress-fill[data-percent]").forEach(function (fill) {
    fill.style.width = fill.dataset.percent + "%";
  });
})();
