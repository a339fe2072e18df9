"""Voilà's markdown renderer for test_browser's server, with one change: an image Voilà
cannot inline is left as a link instead of failing the page. Voilà inlines a markdown
image by asking its contents manager for the path, taken from its root, and that raises
for a path outside the root; the notebooks' static figures are in ``docs/figures/``
(``../docs/figures/<name>.svg`` from a notebook: what GitHub and Binder resolve), outside
the ``notebooks/`` folder the test serves. (Voilà is only a test harness here.)"""

from tornado.web import HTTPError
from voila.exporter import VoilaMarkdownRenderer


class LinkImagesOutsideRoot(VoilaMarkdownRenderer):
    """Inline what Voilà can; leave an image outside its root as a plain image link."""

    def image(self, text: str, url: str, title: str | None = None) -> str:
        try:
            return super().image(text, url, title)
        except HTTPError:  # "... is outside root contents directory"
            return super(VoilaMarkdownRenderer, self).image(text, url, title)
