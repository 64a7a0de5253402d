"""Real text of the kinds apps send, for measuring exports' tokenizers (refusals, exact ids).

Every function returns a list[str], the same on every run (sorted sources, a seeded sample):

* `squad_questions()`, `squad_paragraphs()`: SQuAD v1.1 dev (typed questions; Wikipedia
  paragraphs), from ../shared/data; `squad_pairs()`: (question, paragraph) tuples.
* `typographic_messages()`: English program messages with typographic quotes and
  apostrophes, from the GNU `en@quot` gettext catalogs installed on the machine.
* `program_messages(languages)`: translated program messages from the installed gettext
  catalogs of each language, `count` per language.
* `by_kind()`: all of the above but the pairs, by name.
* `chat_lines()`: short chat-like lines written for this (emoji with zero-width joiners,
  accents, typographic punctuation, CJK, Korean, Hebrew, Hindi).
* `sst2(split)`: SST-2's movie-review sentences and their labels, from ../shared/data.
"""

import json
import random
import re
import struct
from pathlib import Path

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
LOCALES = Path("/usr/share/locale")
LANGUAGES = ("de", "fr", "es", "it", "pt_BR", "ru", "pl", "tr", "ja", "zh_CN")
SEED = 0

CHAT_LINES = [
    "lol that’s amazing 😂😂",
    "See you at the café at 5? ☕️",
    "Happy birthday!!! 🎉🎂 love you ❤️",
    "“Best. Movie. Ever.” — no spoilers…",
    "👨‍👩‍👧‍👦 family trip to Zürich next week",
    "naïve question: what’s the ETA?",
    "今日はありがとう！また明日ね 😊",
    "你好，明天见！",
    "안녕하세요, 잘 지내세요?",
    "שלום, מה שלומך?",
    "नमस्ते, आप कैसे हैं?",
    "Ça va? On se voit à 18h 👍🏽",
    "Straße gesperrt – Umleitung über Köln",
    "ok",
    "¿Dónde está la estación? ¡Gracias!",
    "Привет! Как дела?",
]


def squad_questions(path=None):
    return [qa["question"] for paragraph in _squad_paragraphs(path) for qa in paragraph["qas"]]


def squad_paragraphs(path=None):
    return [paragraph["context"] for paragraph in _squad_paragraphs(path)]


def squad_pairs(path=None):
    """(question, its paragraph) for each SQuAD dev question: text pairs as a reranker gets them."""
    return [(qa["question"], paragraph["context"]) for paragraph in _squad_paragraphs(path) for qa in paragraph["qas"]]


def typographic_messages(count=2000, locales=LOCALES):
    return _sample(catalog_messages("en@quot", locales), count)


def program_messages(languages=LANGUAGES, count=200, locales=LOCALES):
    """`count` messages of each language, language after language."""
    return [message for language in languages for message in _sample(catalog_messages(language, locales), count)]


def chat_lines():
    return list(CHAT_LINES)


def sst2(split="dev"):
    """(sentences, labels) of SST-2's `split` (dev or train)."""
    rows = (DATA / "glue" / "SST-2" / f"{split}.tsv").read_text(encoding="utf-8").splitlines()[1:]
    sentences, labels = zip(*(row.rsplit("\t", 1) for row in rows))
    return list(sentences), [int(label) for label in labels]


def by_kind():
    """{kind: texts} of the kinds of issue 43's table, in its order."""
    return {
        "SQuAD v1.1 dev questions": squad_questions(),
        "SQuAD v1.1 dev paragraphs": squad_paragraphs(),
        "English program messages with typographic quotes (en@quot)": typographic_messages(),
        f"program messages in {len(LANGUAGES)} languages": program_messages(),
        "chat-like lines": chat_lines(),
    }


def catalog_messages(language, locales=LOCALES):
    """The translated messages of every gettext catalog of `language`, each once, in file order."""
    folder = Path(locales) / language / "LC_MESSAGES"
    paths = sorted(folder.glob("*.mo"))
    if not paths:
        raise FileNotFoundError(f"no gettext catalogs (*.mo) in {folder}")
    messages = {}
    for path in paths:
        for message in mo_messages(path):
            messages.setdefault(message, None)
    return list(messages)


def mo_messages(path):
    """The translations in a gettext .mo file (plural forms each), decoded with the catalog's
    own charset. A tiny reader: Python's `gettext` stops at catalogs in legacy charsets."""
    data = Path(path).read_bytes()
    order = {0x950412DE: "<", 0xDE120495: ">"}.get(struct.unpack("<I", data[:4])[0])
    if order is None:
        raise ValueError(f"{path} is not a gettext .mo file")
    count, originals, translations = struct.unpack(order + "3I", data[8:20])

    def entry(table, index):
        length, offset = struct.unpack(order + "2I", data[table + 8 * index : table + 8 * index + 8])
        return data[offset : offset + length]

    header = entry(translations, 0).decode("ascii", "replace") if count and not entry(originals, 0) else ""
    charset = re.search(r"charset=([\w.-]+)", header)
    charset = charset.group(1) if charset and charset.group(1).upper() != "CHARSET" else "utf-8"
    messages = []
    for index in range(count):
        if entry(originals, index):
            messages += [part.decode(charset) for part in entry(translations, index).split(b"\0") if part.strip()]
    return messages


def _squad_paragraphs(path):
    path = Path(path or DATA / "squad" / "dev-v1.1.json")
    with open(path, encoding="utf-8") as file:
        return [paragraph for article in json.load(file)["data"] for paragraph in article["paragraphs"]]


def _sample(messages, count):
    return messages if len(messages) <= count else random.Random(SEED).sample(messages, count)
