// The static site of course_tools/site.py, once the page is parsed:
// - the math of the markdown cells rendered with KaTeX (code and outputs are left alone: a "$" in a printed
//   line is not math);
// - a copy button on every code cell;
// - the search box: the first time the reader types, assets/search-documents.js (one document per section of
//   every notebook) is loaded and MiniSearch (assets/minisearch, vendored from npm, loaded before require.js)
//   indexes it in the browser, with no server and no network. Enter opens the first result.
document.addEventListener("DOMContentLoaded", function () {
  renderMath();
  addCopyButtons();
  wireSearch();
});

function renderMath() {
  if (typeof renderMathInElement === "function") {
    var cells = document.querySelectorAll(".jp-MarkdownCell .jp-RenderedMarkdown, .course-site-math");
    for (var i = 0; i < cells.length; i++) {
      renderMathInElement(cells[i], {
        delimiters: [
          {left: "$$", right: "$$", display: true},
          {left: "\\[", right: "\\]", display: true},
          {left: "$", right: "$", display: false},
          {left: "\\(", right: "\\)", display: false}
        ],
        throwOnError: false
      });
    }
  }
  document.body.setAttribute("data-course-math", "rendered");
}

// ------------------------------------------------------------------------------------------- copy buttons

function copyText(text, done) {
  // The clipboard API where the page may use it; else a selected textarea and the copy command.
  if (navigator.clipboard && window.isSecureContext) {
    navigator.clipboard.writeText(text).then(function () { done(true); }, function () { done(fallbackCopy(text)); });
  } else {
    done(fallbackCopy(text));
  }
}

function fallbackCopy(text) {
  var area = document.createElement("textarea");
  area.value = text;
  area.setAttribute("readonly", "");
  area.style.position = "fixed";
  area.style.opacity = "0";
  document.body.appendChild(area);
  area.select();
  var ok = false;
  try { ok = document.execCommand("copy"); } catch (e) { ok = false; }
  document.body.removeChild(area);
  return ok;
}

function addCopyButtons() {
  var editors = document.querySelectorAll(".jp-CodeCell .jp-InputArea-editor");
  for (var i = 0; i < editors.length; i++) {
    (function (editor) {
      var pre = editor.querySelector("pre");
      if (!pre) { return; }
      var button = document.createElement("button");
      button.type = "button";
      button.className = "course-site-copy";
      button.textContent = "Copy";
      button.setAttribute("aria-label", "Copy this code");
      button.addEventListener("click", function () {
        copyText(pre.textContent.replace(/\n$/, ""), function (ok) {
          button.textContent = ok ? "Copied" : "Select and copy";
          button.setAttribute("data-copied", ok ? "yes" : "no");
          setTimeout(function () { button.textContent = "Copy"; }, 1500);
        });
      });
      editor.classList.add("course-site-has-copy");
      editor.appendChild(button);
    })(editors[i]);
  }
}

// ------------------------------------------------------------------------------------------------ search

var courseSearch = null;

var documentsWaiting = null;  // callbacks waiting for assets/search-documents.js, loaded on the first search

function withDocuments(then) {
  if (window.COURSE_SEARCH_DOCUMENTS) { then(); return; }
  if (documentsWaiting !== null) { documentsWaiting.push(then); return; }
  documentsWaiting = [then];
  var script = document.createElement("script");
  script.src = "assets/search-documents.js";
  function done() { var waiting = documentsWaiting; documentsWaiting = null; waiting.forEach(function (f) { f(); }); }
  script.onload = done;
  script.onerror = done;  // searchIndex() then says that search is not available
  document.head.appendChild(script);
}

function searchIndex() {
  if (courseSearch === null && typeof MiniSearch === "function" && window.COURSE_SEARCH_DOCUMENTS) {
    courseSearch = new MiniSearch({
      fields: ["title", "heading", "text"],
      storeFields: ["page", "anchor", "title", "heading", "text"],
      searchOptions: {boost: {heading: 3, title: 2}, prefix: true, fuzzy: 0.2, combineWith: "AND"}
    });
    courseSearch.addAll(window.COURSE_SEARCH_DOCUMENTS);
  }
  return courseSearch;
}

function excerpt(text, terms) {
  var lower = text.toLowerCase();
  var at = -1;
  for (var i = 0; i < terms.length && at < 0; i++) { at = lower.indexOf(terms[i].toLowerCase()); }
  if (at < 0) { return text.slice(0, 140) + (text.length > 140 ? " ..." : ""); }
  var start = Math.max(0, at - 60);
  return (start > 0 ? "... " : "") + text.slice(start, at + 90) + (at + 90 < text.length ? " ..." : "");
}

function wireSearch() {
  var input = document.getElementById("course-site-search");
  var list = document.getElementById("course-site-results");
  if (!input || !list) { return; }
  function say(text) {
    var none = document.createElement("li");
    none.className = "course-site-no-results";
    none.textContent = text;
    list.appendChild(none);
  }
  function show() {
    var query = input.value.trim();
    list.innerHTML = "";
    list.removeAttribute("data-count");
    if (!query) { return; }
    // MiniSearch finds words: a query of one letter, or of punctuation only, has none to look for
    if ((query.match(/[\p{L}\p{N}]/gu) || []).length < 2) {
      say("Type at least 2 letters or digits to search.");
      return;
    }
    var index = searchIndex();
    if (index === null) {
      say("Search is not available on this page.");
      return;
    }
    var results = [];
    try {
      results = index.search(query).slice(0, 12);
    } catch (e) {
      results = [];
    }
    list.setAttribute("data-count", String(results.length));
    if (!results.length) {
      say("Nothing found for \u201c" + query + "\u201d.");
      return;
    }
    for (var i = 0; i < results.length; i++) {
      var r = results[i];
      var item = document.createElement("li");
      var link = document.createElement("a");
      link.href = r.page + (r.anchor ? "#" + r.anchor : "");
      link.className = "course-site-result";
      var where = document.createElement("span");
      where.className = "course-site-result-page";
      where.textContent = r.title;
      var heading = document.createElement("span");
      heading.className = "course-site-result-heading";
      heading.textContent = r.heading;
      var words = document.createElement("span");
      words.className = "course-site-result-text";
      words.textContent = excerpt(r.text, r.terms);
      link.appendChild(heading);
      link.appendChild(where);
      link.appendChild(words);
      item.appendChild(link);
      list.appendChild(item);
    }
  }
  input.addEventListener("input", function () { withDocuments(show); });
  input.addEventListener("keydown", function (event) {
    if (event.key === "Enter") {
      var first = list.querySelector("a.course-site-result");
      if (first) { window.location.href = first.href; } else { withDocuments(show); }
      event.preventDefault();
    } else if (event.key === "Escape") {
      input.value = "";
      show();
    }
  });
}
