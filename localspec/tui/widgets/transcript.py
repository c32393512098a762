"""The chat transcript: one box per turn; replies keep each token's source so accepted
draft tokens can be shown in a colour (a toggle)."""

from __future__ import annotations

from rich.text import Text
from textual.containers import VerticalScroll
from textual.widgets import Static

from localspec.types import TokenSource

SOURCE_STYLES = {
    TokenSource.ACCEPTED: "bold green",
    TokenSource.BONUS: "cyan",
}
"""Styles of marked tokens; recovered and plain tokens (the target's own) stay unstyled."""


class MessageBox(Static):
    """One user or system turn."""

    def __init__(self, role: str, content: str) -> None:
        super().__init__(Text(content), classes=f"message -{role}", markup=False)
        self.role = role
        self.content = content
        self.border_title = role


class ReplyBox(Static):
    """The assistant's reply, streamed token by token."""

    def __init__(self, show_accepted: bool = True) -> None:
        super().__init__("", classes="message -assistant")
        self.pieces: list[tuple[str, TokenSource]] = []
        """Reply text in emitted order, with where each token came from."""
        self.show_accepted = show_accepted
        """Colour accepted draft tokens (and bonus tokens)."""
        self.border_title = "assistant"
        self.status = ""
        """Shown in the bottom border: streaming, stopped, finish reason."""

    @property
    def text(self) -> str:
        """The reply so far."""
        return "".join(t for t, _ in self.pieces)

    def append(self, pieces: list[tuple[str, TokenSource]]) -> None:
        """Add streamed text and repaint."""
        self.pieces.extend(p for p in pieces if p[0])
        self._repaint()

    def set_show_accepted(self, show: bool) -> None:
        """Turn the accepted-token colouring on or off."""
        self.show_accepted = show
        self._repaint()

    def set_status(self, status: str) -> None:
        """Set the bottom-border note."""
        self.status = status
        self.border_subtitle = status

    def _repaint(self) -> None:
        text = Text()
        for chunk, source in self.pieces:
            style = SOURCE_STYLES.get(source, "") if self.show_accepted else ""
            text.append(chunk, style=style)
        self.update(text)


class Transcript(VerticalScroll):
    """The scrolling list of turns; sticks to the bottom while a reply streams."""

    def add_message(self, role: str, content: str) -> MessageBox:
        """Append a finished user/system turn."""
        box = MessageBox(role, content)
        self.mount(box)
        self.anchor()
        return box

    def start_reply(self, show_accepted: bool) -> ReplyBox:
        """Append an empty assistant reply to stream into."""
        box = ReplyBox(show_accepted)
        self.mount(box)
        self.anchor()
        return box

    def set_show_accepted(self, show: bool) -> None:
        """Apply the accepted-token toggle to every reply."""
        for box in self.query(ReplyBox):
            box.set_show_accepted(show)

    async def clear(self) -> None:
        """Remove every turn."""
        await self.remove_children()
