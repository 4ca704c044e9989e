"""Render a `tmux capture-pane -e -p` dump (text with SGR colour codes) as a PNG.

    python ansi_to_png.py screen.ansi out.png [font.ttf]

Needs Pillow. Handles the SGR codes a terminal Neovim emits: reset, bold, reverse, 16/256-colour
and truecolour foreground and background.
"""

from __future__ import annotations

import re
import sys

from PIL import Image, ImageDraw, ImageFont

BASE16 = [
    (0x1D, 0x1F, 0x21),
    (0xCC, 0x66, 0x66),
    (0xB5, 0xBD, 0x68),
    (0xF0, 0xC6, 0x74),
    (0x81, 0xA2, 0xBE),
    (0xB2, 0x94, 0xBB),
    (0x8A, 0xBE, 0xB7),
    (0xC5, 0xC8, 0xC6),
    (0x96, 0x98, 0x96),
    (0xDE, 0x93, 0x5F),
    (0xA3, 0xBE, 0x8C),
    (0xF0, 0xD0, 0x8A),
    (0x9C, 0xC0, 0xDE),
    (0xC9, 0xA8, 0xD4),
    (0xA3, 0xD9, 0xD2),
    (0xFF, 0xFF, 0xFF),
]
DEFAULT_FG = (0xD8, 0xDA, 0xD9)
DEFAULT_BG = (0x14, 0x16, 0x18)
SGR = re.compile(r"\x1b\[([0-9;:]*)m")


def color256(n: int) -> tuple[int, int, int]:
    if n < 16:
        return BASE16[n]
    if n < 232:
        n -= 16
        steps = [0, 95, 135, 175, 215, 255]
        return steps[n // 36], steps[(n // 6) % 6], steps[n % 6]
    v = 8 + (n - 232) * 10
    return v, v, v


def cells(line: str, state: dict[str, object]) -> list[tuple[str, dict[str, object]]]:
    out: list[tuple[str, dict[str, object]]] = []
    pos = 0
    for m in SGR.finditer(line):
        out.extend((ch, dict(state)) for ch in line[pos : m.start()])
        pos = m.end()
        codes = [int(c) if c else 0 for c in re.split("[;:]", m.group(1))] or [0]
        i = 0
        while i < len(codes):
            c = codes[i]
            if c == 0:
                state.clear()
            elif c == 1:
                state["bold"] = True
            elif c == 22:
                state.pop("bold", None)
            elif c == 7:
                state["reverse"] = True
            elif c == 27:
                state.pop("reverse", None)
            elif 30 <= c <= 37 or 90 <= c <= 97:
                state["fg"] = BASE16[c - 30 if c < 90 else c - 82]
            elif 40 <= c <= 47 or 100 <= c <= 107:
                state["bg"] = BASE16[c - 40 if c < 100 else c - 92]
            elif c in (39, 49):
                state.pop("fg" if c == 39 else "bg", None)
            elif c in (38, 48) and i + 1 < len(codes):
                key = "fg" if c == 38 else "bg"
                if codes[i + 1] == 5 and i + 2 < len(codes):
                    state[key] = color256(codes[i + 2])
                    i += 2
                elif codes[i + 1] == 2 and i + 4 < len(codes):
                    state[key] = tuple(codes[i + 2 : i + 5])
                    i += 4
            i += 1
    out.extend((ch, dict(state)) for ch in line[pos:])
    return out


def main(src: str, dst: str, font_path: str = "/usr/share/fonts/truetype/dejavu/DejaVuSansMono.ttf") -> None:
    font = ImageFont.truetype(font_path, 15)
    bold = ImageFont.truetype(font_path.replace("Mono.ttf", "Mono-Bold.ttf"), 15)
    w, h = 9, 19
    state: dict[str, object] = {}
    rows = [cells(line, state) for line in open(src, encoding="utf-8").read().split("\n")]
    while rows and not rows[-1]:
        rows.pop()
    cols = max(len(r) for r in rows)
    img = Image.new("RGB", (cols * w + 16, len(rows) * h + 16), DEFAULT_BG)
    draw = ImageDraw.Draw(img)
    for y, row in enumerate(rows):
        for x, (ch, st) in enumerate(row):
            fg, bg = st.get("fg", DEFAULT_FG), st.get("bg", DEFAULT_BG)
            if st.get("reverse"):
                fg, bg = bg, fg
            px, py = 8 + x * w, 8 + y * h
            if bg != DEFAULT_BG:
                draw.rectangle([px, py, px + w - 1, py + h - 1], fill=bg)  # type: ignore[arg-type]
            if ch.strip():
                draw.text((px, py), ch, font=bold if st.get("bold") else font, fill=fg)  # type: ignore[arg-type]
    img.save(dst)


if __name__ == "__main__":
    main(*sys.argv[1:])
