"""Toasts as one line, "title: message", so that one fits the single row above the footer.

Textual draws a toast's title on a line of its own and has no option for one line; the cockpit
is the only app in its process, so its toasts are drawn this way everywhere (`install`)."""

from __future__ import annotations

from textual.content import Content
from textual.widgets._toast import Toast


def one_line_toast(self: Toast) -> Content:
    notification = self._notification
    message = Content.from_markup(notification.message) if notification.markup else Content(notification.message)
    message = Content(" ").join(message.split("\n"))
    if notification.title:
        return Content.assemble((notification.title + ": ", self.get_visual_style("toast--title")), message)
    return message


def install() -> None:
    Toast.render = one_line_toast  # type: ignore[method-assign]
