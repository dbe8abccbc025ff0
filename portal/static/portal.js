// The pages work without this script; it adds a copy button to a secret and a confirmation
// before a form that changes something marked data-confirm.
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  document.querySelectorAll("button[data-copy]").forEach(function (b) {
    var input = document.getElementById(b.getAttribute("data-copy"));
    var status = document.getElementById("copy-status");
    if (!input) return;
    b.hidden = false;
    b.addEventListener("click", function () {
      var said = function (ok) {
        if (status) status.textContent = ok ? "Copied to the clipboard." : "Could not copy: select the secret and copy it.";
      };
      input.select();
      if (navigator.clipboard && navigator.clipboard.writeText) {
        navigator.clipboard.writeText(input.value).then(function () { said(true); }, function () {
          said(document.execCommand && document.execCommand("copy"));
        });
      } else {
        said(document.execCommand && document.execCommand("copy"));
      }
    });
  });
  document.querySelectorAll("form[data-confirm]").forEach(function (f) {
    f.addEventListener("submit", function (e) {
      if (!window.confirm(f.getAttribute("data-confirm"))) e.preventDefault();
    });
  });
});
