// The report page's window chips: picking hour / day / week shows it at once (a range waits for
// its dates and the Show button). No data is read or written here.
(function () {
  "use strict";
  var form = document.getElementById("report-form");
  if (!form) return;
  form.addEventListener("change", function (event) {
    var target = event.target;
    if (target.name !== "window") return;
    form.querySelectorAll(".chip").forEach(function (chip) {
      chip.classList.toggle("chip-active", chip.contains(target));
    });
    if (target.value !== "custom") {
      form.querySelector("[name=start]").value = "";
      form.querySelector("[name=end]").value = "";
      form.submit();
    } else {
      form.querySelector("[name=start]").focus();
    }
  });
})();
