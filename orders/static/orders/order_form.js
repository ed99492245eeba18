// Item rows of the order form: "Add item" clones the formset's empty form; "✕" marks a row
// deleted (Django's formset DELETE field) and hides it.
(function () {
  "use strict";
  var rows = document.getElementById("item-rows");
  var template = document.getElementById("item-template");
  var total = document.getElementById("id_items-TOTAL_FORMS");

  document.getElementById("add-item").addEventListener("click", function () {
    var index = parseInt(total.value, 10);
    var html = template.innerHTML.replace(/__prefix__/g, String(index));
    rows.insertAdjacentHTML("beforeend", html);
    total.value = String(index + 1);
    var inputs = rows.lastElementChild.querySelectorAll("input[type=text]");
    if (inputs.length) inputs[0].focus();
  });

  rows.addEventListener("click", function (event) {
    var button = event.target.closest(".remove-item");
    if (!button) return;
    var row = button.closest(".item-row");
    var visible = rows.querySelectorAll(".item-row:not(.hidden)").length;
    if (visible <= 1) return; // keep at least one item
    var del = row.querySelector("input[name$='-DELETE']");
    if (del) del.value = "on";
    row.classList.add("hidden");
  });
})();
