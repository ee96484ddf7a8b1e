"""Token counts for text and for one provider history item.

Contract:

- ``count_text`` is tiktoken's count (``encode_ordinary``: special-token text is
  plain text, never an error) for ``o200k_base`` and ``cl100k_base``. An
  encoding loads once per process, only from BPE files already in
  ``TIKTOKEN_CACHE_DIR`` (default: ``<venv>/tiktoken``) whose hash matches:
  this module never lets tiktoken reach the network. Without the files every
  count is the estimate ``ceil(len(text) / 4)``, and ``tokenizer_status`` says
  so for the UI.
- ``count_item`` estimates what ONE history item of a wire format (``anthropic``,
  ``openai_chat``, ``openai_responses``, ``gemini``) costs as input: its text,
  plus ``MESSAGE_OVERHEAD`` per item; tool calls cost their name and JSON
  arguments, tool results their text or JSON; unknown blocks their JSON.
- Media are priced from what they are, never from the length of their base64:
  images from the pixel size in their header (``image_dimensions`` reads the
  first ``HEADER_BYTES`` only, ``JPEG_HEADER_BYTES`` for a JPEG whose frame
  header lies further in), per provider (``image_tokens``); PDFs from their
  page count (``document_tokens``); audio and video from their byte size at an
  assumed bit rate. Images known only by URL or file id cost
  ``DEFAULT_IMAGE_TOKENS``, such documents ``DEFAULT_DOCUMENT_TOKENS``.

These are budgeting estimates, not billing: providers add template tokens of
their own and price media differently from model to model.

Caches (process-wide, documented module state): the loaded encodings, and an
LRU of counts for texts under ``SHORT_TEXT`` characters.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import json
import math
import os
import re
import struct
import sys
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tiktoken import Encoding

DEFAULT_ENCODING = "o200k_base"
ESTIMATE_STATUS = "estimate:len/4"
MESSAGE_OVERHEAD = 4
SHORT_TEXT = 2_048
HEADER_BYTES = 64 * 1024
JPEG_HEADER_BYTES = 1024 * 1024  # EXIF/ICC segments may push the frame header far in
DEFAULT_IMAGE_TOKENS = 1_000
DEFAULT_DOCUMENT_TOKENS = 3_000  # two pages at the Anthropic/OpenAI page rate

# A PDF page is sent as its extracted text plus (Anthropic, OpenAI) an image of
# the page: Anthropic documents 1,500-3,000 tokens a page, we take the low end;
# Gemini prices a page as one 258-token image. Without a countable page tree we
# assume one page per 3,000 bytes.
PAGE_TOKENS = {"anthropic": 1_500, "openai": 1_500, "gemini": 258}
BYTES_PER_PAGE = 3_000

# Audio and video: tokens per second of media, and the bit rate assumed to turn
# bytes into seconds (WAV states its own byte rate in its header).
MEDIA_TOKENS_PER_SECOND = {
    ("gemini", "audio"): 32,
    ("gemini", "video"): 295,  # 263 for frames + 32 for the soundtrack
    ("openai", "audio"): 10,
}
MEDIA_BYTES_PER_SECOND = {"audio": 16_000, "video": 250_000}

# tiktoken's cache file names (sha1 of the download URL) and their sha256.
_BPE_FILES = {
    "cl100k_base": (
        "9b5ad71b2ce5302211f9c61530b329a4922fc6a4",
        "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    ),
    "o200k_base": (
        "fb374d419588a4632f3f557e76b4b70aebbca790",
        "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    ),
}
_O200K_PREFIXES = (
    "gpt-4o",
    "chatgpt-4o",
    "gpt-4.1",
    "gpt-4.5",
    "gpt-5",
    "gpt-oss",
    "o1",
    "o3",
    "o4",
)
_CL100K_PREFIXES = ("gpt-4", "gpt-3.5", "gpt-35", "text-embedding")


# ------------------------------------------------------------------ text


def count_text(text: str, encoding: str = DEFAULT_ENCODING) -> int:
    """Tokens of ``text`` in ``encoding``; ``ceil(len/4)`` if it cannot load."""
    if not text:
        return 0
    if len(text) < SHORT_TEXT:
        return _count_short(encoding, text)
    return _count(encoding, text)


def estimate_tokens(text: str) -> int:
    """The fallback when no tokenizer loads: four characters a token."""
    return math.ceil(len(text) / 4)


def tokenizer_status(encoding: str = DEFAULT_ENCODING) -> str:
    """``"tiktoken:<encoding>"``, or ``"estimate:len/4"`` when counts are estimates."""
    return f"tiktoken:{encoding}" if _encoding(encoding) is not None else ESTIMATE_STATUS


def encoding_for(format: str, model: str) -> str:
    """The encoding that counts ``model``'s tokens best among the two we load.

    Only OpenAI models use a tiktoken encoding; for Anthropic and Gemini
    ``o200k_base`` is the closest estimate."""
    name = model.lower().rsplit("/", 1)[-1]  # "openai/gpt-4o" names the same model
    if format.startswith("openai"):
        if name.startswith(_O200K_PREFIXES):
            return "o200k_base"
        if name.startswith(_CL100K_PREFIXES):
            return "cl100k_base"
    return DEFAULT_ENCODING


def load_encoding(name: str, cache_dir: Path | None) -> Encoding | None:
    """tiktoken's ``name`` from ``cache_dir``, or None if its BPE file is absent
    or damaged (tiktoken would then try to download it: never here).

    tiktoken reads the directory named by ``TIKTOKEN_CACHE_DIR``; when that is
    unset it is set to ``cache_dir``, so pass the directory it names if set."""
    if name not in _BPE_FILES or cache_dir is None:
        return None
    file_name, sha256 = _BPE_FILES[name]
    try:
        data = (cache_dir / file_name).read_bytes()
    except OSError:
        return None
    if hashlib.sha256(data).hexdigest() != sha256:
        return None
    # tiktoken finds its files through this variable only.
    os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(cache_dir))
    try:
        import tiktoken

        return tiktoken.get_encoding(name)
    except Exception:  # any failure means "estimate instead"
        return None


def _cache_dir() -> Path | None:
    configured = os.environ.get("TIKTOKEN_CACHE_DIR") or os.environ.get("DATA_GYM_CACHE_DIR")
    if configured:
        return Path(configured)
    default = Path(sys.prefix) / "tiktoken"  # where the Makefile points it
    return default if default.is_dir() else None


@functools.cache
def _encoding(name: str) -> Encoding | None:
    return load_encoding(name, _cache_dir())


@functools.lru_cache(maxsize=4_096)
def _count_short(encoding: str, text: str) -> int:
    return _count(encoding, text)


def _count(encoding: str, text: str) -> int:
    enc = _encoding(encoding)
    if enc is None:
        return estimate_tokens(text)
    return len(enc.encode_ordinary(text))


def _json_tokens(value: Any, encoding: str) -> int:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    return count_text(text, encoding)


def _text_or_json(value: Any, encoding: str) -> int:
    if value is None:
        return 0
    if isinstance(value, str):
        return count_text(value, encoding)
    return _json_tokens(value, encoding)


# ------------------------------------------------------------------ items


def count_item(format: str, item: Mapping[str, Any], encoding: str) -> int:
    """Input tokens of one history item of wire format ``format``."""
    if not isinstance(item, Mapping):
        return MESSAGE_OVERHEAD + _json_tokens(item, encoding)
    if format == "anthropic":
        body = _anthropic_content(item.get("content"), encoding)
    elif format == "openai_chat":
        body = _chat_message(item, encoding)
    elif format == "openai_responses":
        body = _responses_item(item, encoding)
    elif format == "gemini":
        body = sum(_gemini_part(part, encoding) for part in item.get("parts") or ())
    else:
        body = _json_tokens(item, encoding)
    return MESSAGE_OVERHEAD + body


def _anthropic_content(content: Any, encoding: str) -> int:
    if isinstance(content, list):
        return sum(_anthropic_block(block, encoding) for block in content)
    return _text_or_json(content, encoding)


def _anthropic_block(block: Any, encoding: str) -> int:
    if not isinstance(block, Mapping):
        return _text_or_json(block, encoding)
    kind = block.get("type")
    if kind == "text":
        return count_text(str(block.get("text") or ""), encoding)
    if kind == "thinking":
        return count_text(str(block.get("thinking") or ""), encoding)
    if kind in ("tool_use", "server_tool_use"):
        name = count_text(str(block.get("name") or ""), encoding)
        return name + _json_tokens(block.get("input") or {}, encoding)
    if kind == "tool_result":
        return _anthropic_content(block.get("content"), encoding)
    if kind in ("image", "document"):
        return _anthropic_source(block, encoding)
    return _json_tokens(block, encoding)


def _anthropic_source(block: Mapping[str, Any], encoding: str) -> int:
    source = block.get("source") or {}
    labels = sum(_text_or_json(block.get(key), encoding) for key in ("title", "context"))
    kind = source.get("type")
    if kind == "text":
        return labels + count_text(str(source.get("data") or ""), encoding)
    if kind == "content":
        return labels + _anthropic_content(source.get("content"), encoding)
    fallback_mime = "image/*" if block.get("type") == "image" else "application/pdf"
    mime = str(source.get("media_type") or fallback_mime)
    data = source.get("data") if kind == "base64" else None
    return labels + _media_tokens("anthropic", mime, data, encoding)


def _chat_message(item: Mapping[str, Any], encoding: str) -> int:
    tokens = _openai_content(item.get("content"), encoding)
    tokens += _text_or_json(item.get("refusal"), encoding)
    calls = list(item.get("tool_calls") or ())
    if item.get("function_call"):
        calls.append({"function": item["function_call"]})
    for call in calls:
        spec = call.get("function") or call.get("custom") or {}
        tokens += count_text(str(spec.get("name") or ""), encoding)
        tokens += _text_or_json(spec.get("arguments", spec.get("input")), encoding)
    return tokens


def _responses_item(item: Mapping[str, Any], encoding: str) -> int:
    kind = item.get("type") or ("message" if "role" in item else None)
    if kind == "message":
        return _openai_content(item.get("content"), encoding)
    if kind in ("function_call", "custom_tool_call"):
        name = count_text(str(item.get("name") or ""), encoding)
        return name + _text_or_json(item.get("arguments", item.get("input")), encoding)
    if kind in ("function_call_output", "custom_tool_call_output"):
        return _openai_content(item.get("output"), encoding)
    if kind == "reasoning":
        # Only the readable summary: encrypted reasoning is opaque to us.
        parts = [*(item.get("summary") or ()), *(item.get("content") or ())]
        return _openai_content(parts, encoding)
    return _json_tokens(item, encoding)


def _openai_content(content: Any, encoding: str) -> int:
    if isinstance(content, list):
        return sum(_openai_part(part, encoding) for part in content)
    return _text_or_json(content, encoding)


def _openai_part(part: Any, encoding: str) -> int:
    if not isinstance(part, Mapping):
        return _text_or_json(part, encoding)
    kind = part.get("type")
    if kind in ("text", "input_text", "output_text", "summary_text", "reasoning_text"):
        return count_text(str(part.get("text") or ""), encoding)
    if kind == "refusal":
        return count_text(str(part.get("refusal") or ""), encoding)
    if kind in ("image_url", "input_image"):
        image = part.get("image_url")
        spec = image if isinstance(image, Mapping) else part
        url = image.get("url") if isinstance(image, Mapping) else image
        return _url_media("openai", url, "image/*", encoding, str(spec.get("detail") or "auto"))
    if kind in ("file", "input_file"):
        nested = part.get("file")  # chat nests the file; responses does not
        data = (nested if isinstance(nested, Mapping) else part).get("file_data")
        return _url_media("openai", data, "application/pdf", encoding)
    if kind == "input_audio":
        audio = part.get("input_audio") or {}
        mime = f"audio/{audio.get('format') or 'wav'}"
        return _media_tokens("openai", mime, audio.get("data"), encoding)
    return _json_tokens(part, encoding)


def _gemini_part(part: Any, encoding: str) -> int:
    if not isinstance(part, Mapping):
        return _text_or_json(part, encoding)
    if "text" in part:
        return count_text(str(part.get("text") or ""), encoding)
    inline = _either(part, "inlineData", "inline_data")
    if inline is not None:
        mime = str(_either(inline, "mimeType", "mime_type") or "")
        return _media_tokens("gemini", mime, inline.get("data"), encoding)
    file_data = _either(part, "fileData", "file_data")
    if file_data is not None:  # a URI: only its kind is known
        mime = str(_either(file_data, "mimeType", "mime_type") or "")
        return _media_tokens("gemini", mime, None, encoding)
    for keys, payload in (
        (("functionCall", "function_call"), "args"),
        (("functionResponse", "function_response"), "response"),
    ):
        call = _either(part, *keys)
        if call is not None:
            name = count_text(str(call.get("name") or ""), encoding)
            return name + _text_or_json(call.get(payload), encoding)
    code = _either(part, "executableCode", "executable_code")
    if code is not None:
        return count_text(str(code.get("code") or ""), encoding)
    result = _either(part, "codeExecutionResult", "code_execution_result")
    if result is not None:
        return count_text(str(result.get("output") or ""), encoding)
    return _json_tokens(part, encoding)


def _either(mapping: Mapping[str, Any], *keys: str) -> Any:
    """The first of ``keys`` present: Gemini accepts camelCase and snake_case."""
    for key in keys:
        if key in mapping:
            return mapping[key]
    return None


# ------------------------------------------------------------------ media


def image_tokens(provider: str, size: tuple[int, int] | None, *, detail: str = "auto") -> int:
    """What an image of ``size`` (width, height) costs ``provider``.

    Anthropic: w*h/750 after fitting the long edge in 1568 px, at most 1,600.
    OpenAI: 85 at low detail; otherwise fit in 2048x2048, bring the short side
    down to 768, then 85 + 170 per 512-px tile. Gemini: 258 when both sides are
    at most 384 px, else 258 per 768-px tile. Unknown size: the default."""
    if provider == "openai" and detail == "low":
        return 85
    if size is None or min(size) <= 0:
        return DEFAULT_IMAGE_TOKENS
    width, height = size
    if provider == "openai":
        width, height = _fit(width, height, 2048 / max(width, height))
        width, height = _fit(width, height, 768 / min(width, height))
        return 85 + 170 * math.ceil(width / 512) * math.ceil(height / 512)
    if provider == "gemini":
        if width <= 384 and height <= 384:
            return 258
        return 258 * math.ceil(width / 768) * math.ceil(height / 768)
    width, height = _fit(width, height, 1568 / max(width, height))
    return min(1_600, math.ceil(width * height / 750))


def _fit(width: int, height: int, scale: float) -> tuple[int, int]:
    if scale >= 1:
        return width, height
    return max(1, round(width * scale)), max(1, round(height * scale))


def document_tokens(provider: str, data: bytes) -> int:
    """What a PDF costs: its pages times the provider's page rate (see ``PAGE_TOKENS``)."""
    pages = pdf_page_count(data) or max(1, math.ceil(len(data) / BYTES_PER_PAGE))
    return pages * PAGE_TOKENS.get(provider, PAGE_TOKENS["anthropic"])


_PAGE = re.compile(rb"/Type\s*/Page(?![A-Za-z])")
_OBJECT_STREAM = re.compile(rb"/Type\s*/ObjStm(?![A-Za-z])")


def pdf_page_count(data: bytes) -> int | None:
    """Page objects in a PDF, including those packed in compressed object
    streams (PDF 1.5+); None when none can be found."""
    pages = len(_PAGE.findall(data))
    if pages:
        return pages
    for match in _OBJECT_STREAM.finditer(data):
        start = data.find(b"stream", match.end())
        if start < 0:
            continue
        start += len(b"stream")
        start += 2 if data[start : start + 2] == b"\r\n" else 1
        end = data.find(b"endstream", start)
        try:
            unpacked = zlib.decompressobj().decompress(data[start : end if end > 0 else None])
        except zlib.error:
            continue
        pages += len(_PAGE.findall(unpacked))
    return pages or None


def _url_media(provider: str, url: Any, mime: str, encoding: str, detail: str = "auto") -> int:
    """An OpenAI ``data:`` URL is inline media; any other URL or a file id is unseen."""
    if isinstance(url, str) and url.startswith("data:"):
        head, _, payload = url.partition(",")
        if head.endswith(";base64"):
            return _media_tokens(
                provider, head[5:].split(";")[0] or mime, payload, encoding, detail
            )
    return _media_tokens(provider, mime, None, encoding, detail)


def _media_tokens(provider: str, mime: str, data: Any, encoding: str, detail: str = "auto") -> int:
    kind = mime.split("/")[0].lower()
    if not isinstance(data, str) or not data:
        if kind == "image" or (provider == "openai" and detail == "low"):
            return image_tokens(provider, None, detail=detail)
        return DEFAULT_DOCUMENT_TOKENS if kind in ("application", "text") else DEFAULT_IMAGE_TOKENS
    head = _decode_base64(data, HEADER_BYTES)
    size = image_dimensions(head)
    if size is None and head.startswith(b"\xff\xd8") and len(data) > len(head) * 4 // 3:
        size = image_dimensions(_decode_base64(data, JPEG_HEADER_BYTES))
    if size is not None or kind == "image":
        return image_tokens(provider, size, detail=detail)
    if head.startswith(b"%PDF") or mime == "application/pdf":
        return document_tokens(provider, _decode_base64(data))
    if kind == "text" or mime == "application/json":
        return count_text(_decode_base64(data).decode("utf-8", "replace"), encoding)
    if kind in ("audio", "video"):
        return _av_tokens(provider, kind, head, len(data) * 3 // 4)
    return DEFAULT_DOCUMENT_TOKENS


def _av_tokens(provider: str, kind: str, head: bytes, size: int) -> int:
    per_second = MEDIA_TOKENS_PER_SECOND.get((provider, kind), 32)
    rate = MEDIA_BYTES_PER_SECOND[kind]
    if head[:4] == b"RIFF" and head[8:12] == b"WAVE" and len(head) >= 32:
        rate = struct.unpack("<I", head[28:32])[0] or rate  # fmt chunk's byte rate
    return max(1, math.ceil(size / rate * per_second))


def _decode_base64(data: str, limit: int | None = None) -> bytes:
    """The bytes ``data`` encodes, or only its first ``limit`` bytes; b"" if not base64."""
    text = data if limit is None else data[: (limit + 2) // 3 * 4]
    for candidate in (text, "".join(text.split())):
        if limit is not None:
            candidate = candidate[: len(candidate) // 4 * 4]
        try:
            return base64.b64decode(candidate + "=" * (-len(candidate) % 4))
        except (binascii.Error, ValueError):
            continue
    return b""


# ------------------------------------------------------------------ image headers


def image_dimensions(data: bytes) -> tuple[int, int] | None:
    """(width, height) of a PNG, JPEG, GIF or WebP from its first bytes, or None."""
    for reader in (_png_size, _gif_size, _webp_size, _jpeg_size):
        size = reader(data)
        if size is not None:
            return size if min(size) > 0 else None
    return None


def _png_size(data: bytes) -> tuple[int, int] | None:
    if data[:8] != b"\x89PNG\r\n\x1a\n" or data[12:16] != b"IHDR" or len(data) < 24:
        return None
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def _gif_size(data: bytes) -> tuple[int, int] | None:
    if data[:6] not in (b"GIF87a", b"GIF89a") or len(data) < 10:
        return None
    width, height = struct.unpack("<HH", data[6:10])
    return width, height


def _webp_size(data: bytes) -> tuple[int, int] | None:
    if data[:4] != b"RIFF" or data[8:12] != b"WEBP" or len(data) < 30:
        return None
    chunk = data[12:16]
    if chunk == b"VP8 " and data[23:26] == b"\x9d\x01\x2a":
        width, height = struct.unpack("<HH", data[26:30])
        return width & 0x3FFF, height & 0x3FFF
    if chunk == b"VP8L" and data[20] == 0x2F:
        bits = int.from_bytes(data[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8X":
        return int.from_bytes(data[24:27], "little") + 1, int.from_bytes(data[27:30], "little") + 1
    return None


_SOF_MARKERS = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    """Walk the JPEG segments to the first start-of-frame marker."""
    if data[:2] != b"\xff\xd8":
        return None
    i = 2
    while i + 9 <= len(data):
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
        elif marker in _SOF_MARKERS:
            height, width = struct.unpack(">HH", data[i + 5 : i + 9])
            return width, height
        elif marker == 0x01 or 0xD0 <= marker <= 0xD9:  # no length field
            i += 2
        else:
            i += 2 + struct.unpack(">H", data[i + 2 : i + 4])[0]
    return None
