"""Find every URL an HTML page would fetch from the network, so a test can prove it is offline.

The pipeline's pages are opened where there is no network (air-gapped workers, an artifact
store, a laptop on a train). A page that pulls one stylesheet or script from a CDN renders as
bare links and an empty table there, and nothing says why. `external_references` parses the
document with the standard library's `html.parser` (tags, attributes, `<style>` and
`<script>` bodies, `style=""` attributes) rather than grepping the text, so it knows a
`<script src>` (fetched) from an `<a href>` (followed only when clicked) and from an SVG
`xmlns` (never fetched), and it sees URLs hidden behind character references.

A URL counts as external when it names a network scheme (http, https, ftp, ws, wss) or is
protocol-relative (`//host/x`, which resolves against whatever scheme the page was opened
with). Relative paths and `data:` URIs are local.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

NETWORK_SCHEMES = frozenset({"http", "https", "ftp", "ws", "wss"})

#: Per tag, the attributes whose URL the browser fetches while rendering the page.
_LOAD_ATTRS: dict[str, tuple[str, ...]] = {
    "script": ("src", "href", "xlink:href"),
    "img": ("src", "srcset", "lowsrc"),
    "image": ("src", "href", "xlink:href"),
    "use": ("href", "xlink:href"),
    "feimage": ("href", "xlink:href"),
    "iframe": ("src",),
    "frame": ("src",),
    "portal": ("src",),
    "embed": ("src",),
    "object": ("data", "codebase"),
    "video": ("src", "poster"),
    "audio": ("src",),
    "source": ("src", "srcset"),
    "track": ("src",),
    "input": ("src",),
    "link": ("href", "imagesrcset"),
    "base": ("href",),
}
#: Per tag, the attributes whose URL is only followed when a person clicks or submits.
_LINK_ATTRS: dict[str, tuple[str, ...]] = {
    "a": ("href", "xlink:href", "ping"),
    "area": ("href", "ping"),
    "form": ("action",),
    "button": ("formaction",),
    "blockquote": ("cite",),
    "q": ("cite",),
    "del": ("cite",),
    "ins": ("cite",),
}
#: `<link rel=...>` values that only describe a relation; any other rel fetches something.
_NON_LOADING_RELS = frozenset(
    {"alternate", "author", "bookmark", "canonical", "help", "license", "me", "next", "prev"}
    | {"search", "external", "nofollow", "noopener", "noreferrer"}
)
_SRCSET_ATTRS = frozenset({"srcset", "imagesrcset"})

_SCHEME = re.compile(r"^([a-z][a-z0-9+.\-]*):", re.IGNORECASE)
_CSS_COMMENT = re.compile(r"/\*.*?\*/", re.DOTALL)
_CSS_IMPORT = re.compile(
    r"""@import\s+(?:url\(\s*)?(?:"([^"]*)"|'([^']*)'|([^\s;'")]+))""", re.IGNORECASE
)
_CSS_URL = re.compile(r"""url\(\s*(?:"([^"]*)"|'([^']*)'|([^)\s]*))\s*\)""", re.IGNORECASE)
#: Absolute network URLs anywhere in script or CSS text (a fetch(), an image-set() string).
_TEXT_URL = re.compile(r"""(?:https?|wss?|ftp):(?://|\\\\)[^\s"'`<>)\\]+""", re.IGNORECASE)
#: Protocol-relative URLs in script text, only inside a string literal (else `// comment`).
_TEXT_PROTOCOL_RELATIVE = re.compile(r"""["'`](//[A-Za-z0-9][^\s"'`<>]*)""")
_REFRESH_URL = re.compile(r"""url\s*=\s*['"]?([^'"]+)""", re.IGNORECASE)
_STRIP = "".join(chr(c) for c in range(0x21))  # what browsers trim off a URL: C0 and space


@dataclass(frozen=True)
class Reference:
    """One URL in a page: where it is, and whether rendering the page fetches it."""

    url: str
    tag: str
    """The element it was found on (`style` for a `<style>` body or a style attribute)."""
    attr: str
    """The attribute, or `url()`, `@import` or `text` for CSS and script bodies."""
    line: int
    loads: bool
    """True when the browser fetches it while rendering; False for links a person follows."""

    @property
    def external(self) -> bool:
        return is_external(self.url)

    def __str__(self) -> str:
        how = "loads" if self.loads else "links to"
        return f"line {self.line}: <{self.tag} {self.attr}> {how} {self.url}"


def clean_url(url: str) -> str:
    """The URL as a browser reads it: outer spaces and control characters trimmed, tabs and
    newlines inside removed (so `ht<TAB>tps://` is still https)."""
    return url.strip(_STRIP).replace("\t", "").replace("\n", "").replace("\r", "")


def is_external(url: str) -> bool:
    """Would following this URL need the network? (Relative, data:, file: and about: do not.)"""
    cleaned = clean_url(url)
    if cleaned[:2] in ("//", "\\\\", "/\\", "\\/"):
        return True  # protocol-relative: browsers read a backslash as a slash here
    scheme = _SCHEME.match(cleaned)
    return scheme is not None and scheme.group(1).lower() in NETWORK_SCHEMES


def _srcset_urls(value: str) -> list[str]:
    """The image candidates' URLs of a srcset (HTML's algorithm: a URL ends at whitespace, a
    descriptor list at a comma), so a data: URI's own comma does not split it."""
    urls: list[str] = []
    i, n = 0, len(value)
    while i < n:
        while i < n and (value[i].isspace() or value[i] == ","):
            i += 1
        start = i
        while i < n and not value[i].isspace():
            i += 1
        url = value[start:i]
        if url.endswith(","):
            url = url.rstrip(",")
        else:
            depth = 0
            while i < n and (depth or value[i] != ","):
                depth += {"(": 1, ")": -1}.get(value[i], 0)
                i += 1
        if url:
            urls.append(url)
    return urls


def css_urls(css: str) -> list[tuple[str, str, int]]:
    """`(kind, url, offset)` for each `@import`, `url(...)` and absolute URL string in a
    stylesheet; `offset` is where it starts in `css`, to report the right line."""
    text = _CSS_COMMENT.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), css)  # keeps offsets
    found: list[tuple[str, str, int]] = []
    import_spans: list[tuple[int, int]] = []
    for match in _CSS_IMPORT.finditer(text):
        import_spans.append(match.span())
        found.append(("@import", next(g for g in match.groups() if g is not None), match.start()))
    for match in _CSS_URL.finditer(text):
        if any(a <= match.start() < b for a, b in import_spans):
            continue
        found.append(("url()", next(g for g in match.groups() if g is not None), match.start()))
    seen = {url for _, url, _ in found}
    found += [
        ("text", m.group(0), m.start()) for m in _TEXT_URL.finditer(text) if m.group(0) not in seen
    ]
    return found


def _script_urls(script: str) -> list[tuple[str, int]]:
    urls = [(m.group(0), m.start()) for m in _TEXT_URL.finditer(script)]
    return urls + [(m.group(1), m.start(1)) for m in _TEXT_PROTOCOL_RELATIVE.finditer(script)]


class _Collector(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found: list[Reference] = []
        self._raw: str | None = None  # inside <style> or <script>: its name
        self._raw_line = 0
        self._raw_text: list[str] = []

    def _add(self, url: str, tag: str, attr: str, loads: bool, line: int | None = None) -> None:
        cleaned = clean_url(url)
        if cleaned:
            self.found.append(Reference(cleaned, tag, attr, line or self.getpos()[0], loads))

    def _add_css(self, css: str, tag: str, line: int | None = None) -> None:
        first = line or self.getpos()[0]
        for kind, url, offset in css_urls(css):
            self._add(url, tag, kind, True, first + css.count("\n", 0, offset))

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {name.lower(): value for name, value in attrs if value is not None}
        loads = _LOAD_ATTRS.get(tag, ())
        links = _LINK_ATTRS.get(tag, ())
        if tag == "link":
            rels = set((values.get("rel") or "").lower().split())
            if rels and rels <= _NON_LOADING_RELS:
                loads, links = (), ("href",)
        for name, value in attrs:  # every occurrence: a duplicate attribute is still suspect
            if value is None:
                continue
            if name in loads:
                urls = _srcset_urls(value) if name in _SRCSET_ATTRS else [value]
                for url in urls:
                    self._add(url, tag, name, True)
            elif name in links:
                self._add(value, tag, name, False)
            elif name == "background":  # the legacy attribute on body, table, td...
                self._add(value, tag, name, True)
            elif name == "style":
                self._add_css(value, tag)
        if tag == "meta" and (values.get("http-equiv") or "").lower() == "refresh":
            match = _REFRESH_URL.search(values.get("content") or "")
            if match:
                self._add(match.group(1), tag, "content", True)
        if tag in ("style", "script"):
            self._raw, self._raw_line, self._raw_text = tag, self.getpos()[0], []

    def handle_endtag(self, tag: str) -> None:
        if tag == self._raw:
            self._flush_raw()

    def handle_data(self, data: str) -> None:
        if self._raw:
            self._raw_text.append(data)

    def _flush_raw(self) -> None:
        text, tag, line = "".join(self._raw_text), self._raw, self._raw_line
        self._raw, self._raw_text = None, []
        if tag == "style":
            self._add_css(text, "style", line)
        elif tag == "script":
            for url, offset in _script_urls(text):
                self._add(url, "script", "text", True, line + text.count("\n", 0, offset))

    def close(self) -> None:
        super().close()
        if self._raw:  # an unclosed <style>/<script> still counts
            self._flush_raw()


def references(document: str) -> list[Reference]:
    """Every URL the page holds in a place a browser would use it, local ones included."""
    collector = _Collector()
    collector.feed(document)
    collector.close()
    return collector.found


def external_references(document: str, *, include_links: bool = False) -> list[Reference]:
    """The network URLs rendering the page would fetch; with `include_links`, also the ones
    it only links to (a page meant for offline reading should have neither)."""
    return [r for r in references(document) if r.external and (r.loads or include_links)]


def external_references_in_file(path: Path, *, include_links: bool = False) -> list[Reference]:
    """`external_references` of a file on disk (read as UTF-8, undecodable bytes replaced)."""
    text = Path(path).read_text(encoding="utf-8", errors="replace")
    return external_references(text, include_links=include_links)
