// The static site of course_tools/site.py: render the math of the markdown cells with KaTeX, once the page
// is parsed. Code and outputs are left alone (a "$" in a printed line is not math).
document.addEventListener("DOMContentLoaded", function () {
  if (typeof renderMathInElement !== "function") { return; }
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
  document.body.setAttribute("data-course-math", "rendered");
});
