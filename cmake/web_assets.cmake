# The chat page's files, embedded in the binary at build time by
# cmake/embed_web_assets.cmake: pairs of (URL path, file). Relative files are
# under the source tree's web/; the libraries come from Debian's packages
# libjs-marked, node-dompurify and libjs-highlight.js (licences in web/LICENSES.md).
set(TERN_WEB_ASSETS
  "/"                          "web/index.html"
  "/web/style.css"             "web/style.css"
  "/web/markdown.js"           "web/markdown.js"
  "/web/conversations.js"      "web/conversations.js"
  "/web/api.js"                "web/api.js"
  "/web/app.js"                "web/app.js"
  "/web/LICENSES.md"           "web/LICENSES.md"
  "/web/lib/marked.min.js"     "/usr/share/javascript/marked/marked.min.js"
  "/web/lib/purify.min.js"     "/usr/share/nodejs/dompurify/dist/purify.min.js"
  "/web/lib/highlight.min.js"  "/usr/share/javascript/highlight.js/highlight.min.js"
  "/web/lib/hljs-light.css"    "/usr/share/javascript/highlight.js/styles/atom-one-light.css"
  "/web/lib/hljs-dark.css"     "/usr/share/javascript/highlight.js/styles/atom-one-dark.css"
)
