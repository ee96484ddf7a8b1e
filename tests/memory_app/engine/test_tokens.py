from __future__ import annotations

import base64
import io
import json
import random
import wave
import zlib
from pathlib import Path

import pytest
from PIL import Image

from memory_app.engine import tokens
from memory_app.engine.tokens import (
    DEFAULT_IMAGE_TOKENS,
    MESSAGE_OVERHEAD,
    count_item,
    count_text,
    document_tokens,
    encoding_for,
    estimate_tokens,
    image_dimensions,
    image_tokens,
    load_encoding,
    pdf_page_count,
    tokenizer_status,
)

O200K = "o200k_base"


# ------------------------------------------------------------------ builders


def image_bytes(size: tuple[int, int], fmt: str, *, mode: str = "RGB", **options: object) -> bytes:
    buffer = io.BytesIO()
    Image.new(mode, size, (200, 30, 30, 128)[: len(mode)]).save(buffer, fmt, **options)
    return buffer.getvalue()


def noisy_png(size: tuple[int, int]) -> bytes:
    eight_levels = bytes(value & 0xE0 for value in range(256))  # noisy, but not incompressible
    pixels = random.Random(7).randbytes(size[0] * size[1]).translate(eight_levels)
    buffer = io.BytesIO()
    Image.frombytes("L", size, pixels).save(buffer, "PNG")
    return buffer.getvalue()


def pdf_bytes(pages: int) -> bytes:
    buffer = io.BytesIO()
    first, *rest = [Image.new("RGB", (60, 80), "white") for _ in range(pages)]
    first.save(buffer, "PDF", save_all=True, append_images=rest)
    return buffer.getvalue()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def image_item(fmt: str, png: bytes) -> dict[str, object]:
    """A user message holding ``png`` and the word "look" in wire format ``fmt``."""
    data = b64(png)
    if fmt == "anthropic":
        source = {"type": "base64", "media_type": "image/png", "data": data}
        return {
            "role": "user",
            "content": [{"type": "text", "text": "look"}, {"type": "image", "source": source}],
        }
    if fmt == "openai_chat":
        url = {"url": f"data:image/png;base64,{data}", "detail": "high"}
        return {
            "role": "user",
            "content": [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": url}],
        }
    if fmt == "openai_responses":
        image = {"type": "input_image", "image_url": f"data:image/png;base64,{data}"}
        return {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "look"}, image],
        }
    return {
        "role": "user",
        "parts": [{"text": "look"}, {"inlineData": {"mimeType": "image/png", "data": data}}],
    }


PROVIDER = {
    "anthropic": "anthropic",
    "openai_chat": "openai",
    "openai_responses": "openai",
    "gemini": "gemini",
}


# ------------------------------------------------------------------ text


def test_count_text_matches_tiktoken_known_values() -> None:
    assert count_text("hello world") == 2
    assert count_text("hello world", "cl100k_base") == 2
    assert count_text("tiktoken is great!", "cl100k_base") == 6
    # the two encodings differ on non-English text
    assert count_text("Grüße aus München, 你好世界", O200K) == 9
    assert count_text("Grüße aus München, 你好世界", "cl100k_base") == 12
    assert tokenizer_status() == "tiktoken:o200k_base"
    assert tokenizer_status("cl100k_base") == "tiktoken:cl100k_base"


def test_count_text_treats_special_tokens_as_plain_text() -> None:
    assert count_text("<|endoftext|>") > 1


def test_count_text_of_long_text_bypasses_the_cache_but_counts_the_same() -> None:
    text = " ".join(["hello world"] * 1_000)
    assert len(text) > tokens.SHORT_TEXT
    assert count_text(text) == 2 * 1_000
    assert count_text("") == 0


def test_estimate_is_a_quarter_of_the_characters_rounded_up() -> None:
    assert estimate_tokens("abcd") == 1
    assert estimate_tokens("abcde") == 2
    assert estimate_tokens("") == 0


def test_unloadable_encoding_falls_back_to_the_estimate() -> None:
    assert count_text("abcdefghi", encoding="p50k_base") == 3
    assert tokenizer_status("p50k_base") == "estimate:len/4"


def test_load_encoding_refuses_missing_or_damaged_files(tmp_path: Path) -> None:
    assert load_encoding(O200K, tmp_path) is None
    assert load_encoding(O200K, None) is None
    (tmp_path / "fb374d419588a4632f3f557e76b4b70aebbca790").write_bytes(b"not a bpe file")
    assert load_encoding(O200K, tmp_path) is None


@pytest.mark.parametrize(
    ("fmt", "model", "expected"),
    [
        ("openai_chat", "gpt-4o-mini", "o200k_base"),
        ("openai_responses", "gpt-4.1", "o200k_base"),
        ("openai_chat", "gpt-5", "o200k_base"),
        ("openai_responses", "o3-mini", "o200k_base"),
        ("openai_chat", "o1", "o200k_base"),
        ("openai_chat", "o4-mini", "o200k_base"),
        ("openai_chat", "gpt-4-turbo", "cl100k_base"),
        ("openai_chat", "gpt-4", "cl100k_base"),
        ("openai_chat", "gpt-3.5-turbo", "cl100k_base"),
        ("openai_chat", "openai/gpt-4", "cl100k_base"),
        ("anthropic", "claude-sonnet-4-5", "o200k_base"),
        ("gemini", "gemini-2.5-flash", "o200k_base"),
    ],
)
def test_encoding_for_model(fmt: str, model: str, expected: str) -> None:
    assert encoding_for(fmt, model) == expected


# ------------------------------------------------------------------ image headers


@pytest.mark.parametrize("size", [(1, 1), (37, 23), (640, 480), (1000, 1000), (3000, 200)])
@pytest.mark.parametrize(
    ("fmt", "options"),
    [
        ("PNG", {}),
        ("JPEG", {}),
        ("JPEG", {"progressive": True}),
        ("GIF", {}),
        ("WEBP", {}),
        ("WEBP", {"lossless": True}),
    ],
)
def test_image_dimensions_reads_the_header(
    size: tuple[int, int], fmt: str, options: dict[str, object]
) -> None:
    assert image_dimensions(image_bytes(size, fmt, **options)[:1_024]) == size


def test_image_dimensions_reads_each_webp_chunk_kind() -> None:
    lossy = image_bytes((37, 23), "WEBP")
    lossless = image_bytes((37, 23), "WEBP", lossless=True)
    extended = image_bytes((37, 23), "WEBP", mode="RGBA")
    assert [data[12:16] for data in (lossy, lossless, extended)] == [b"VP8 ", b"VP8L", b"VP8X"]
    assert {image_dimensions(data) for data in (lossy, lossless, extended)} == {(37, 23)}


def test_image_dimensions_walks_jpeg_segments_past_a_large_icc_profile() -> None:
    profile = random.Random(3).randbytes(150_000)
    jpeg = image_bytes((37, 23), "JPEG", icc_profile=profile)
    assert image_dimensions(jpeg) == (37, 23)
    assert image_dimensions(jpeg[:100_000]) is None  # the frame header lies further in
    source = {"type": "base64", "media_type": "image/jpeg", "data": b64(jpeg)}
    item = {"role": "user", "content": [{"type": "image", "source": source}]}
    assert count_item("anthropic", item, O200K) == MESSAGE_OVERHEAD + image_tokens(
        "anthropic", (37, 23)
    )


def test_image_dimensions_of_non_images_is_none() -> None:
    assert image_dimensions(b"") is None
    assert image_dimensions(b"%PDF-1.7 hello") is None
    assert image_dimensions(image_bytes((10, 10), "PNG")[:20]) is None


# ------------------------------------------------------------------ image costs


@pytest.mark.parametrize(
    ("provider", "size", "detail", "expected"),
    [
        ("anthropic", (200, 200), "auto", 54),
        ("anthropic", (1000, 1000), "auto", 1334),
        ("anthropic", (1092, 1092), "auto", 1590),
        ("anthropic", (4000, 3000), "auto", 1600),
        ("openai", (100, 100), "high", 255),
        ("openai", (1024, 1024), "high", 765),
        ("openai", (1000, 1000), "auto", 765),
        ("openai", (2048, 4096), "high", 1105),
        ("openai", (4096, 4096), "low", 85),
        ("gemini", (384, 384), "auto", 258),
        ("gemini", (200, 100), "auto", 258),
        ("gemini", (1000, 1000), "auto", 1032),
        ("gemini", (385, 100), "auto", 258),
        ("anthropic", None, "auto", DEFAULT_IMAGE_TOKENS),
        ("openai", None, "low", 85),
    ],
)
def test_image_tokens_per_provider(
    provider: str, size: tuple[int, int] | None, detail: str, expected: int
) -> None:
    assert image_tokens(provider, size, detail=detail) == expected


@pytest.mark.parametrize("fmt", ["anthropic", "openai_chat", "openai_responses", "gemini"])
def test_image_costs_its_pixels_not_its_base64_length(fmt: str) -> None:
    flat, noisy = image_bytes((1000, 1000), "PNG"), noisy_png((1000, 1000))
    assert len(b64(flat)) < 10_000 < 400_000 < len(b64(noisy))
    expected = MESSAGE_OVERHEAD + count_text("look") + image_tokens(PROVIDER[fmt], (1000, 1000))
    assert count_item(fmt, image_item(fmt, flat), O200K) == expected
    assert count_item(fmt, image_item(fmt, noisy), O200K) == expected


def test_url_images_cost_the_default() -> None:
    anthropic = {"type": "image", "source": {"type": "url", "url": "https://x.test/cat.png"}}
    chat_low = {
        "type": "image_url",
        "image_url": {"url": "https://x.test/cat.png", "detail": "low"},
    }
    gemini = {"fileData": {"mimeType": "image/png", "fileUri": "gs://b/cat.png"}}
    assert (
        count_item("anthropic", {"role": "user", "content": [anthropic]}, O200K)
        == 4 + DEFAULT_IMAGE_TOKENS
    )
    assert count_item("openai_chat", {"role": "user", "content": [chat_low]}, O200K) == 4 + 85
    assert (
        count_item("gemini", {"role": "user", "parts": [gemini]}, O200K) == 4 + DEFAULT_IMAGE_TOKENS
    )


# ------------------------------------------------------------------ documents and audio


def test_pdf_costs_pages_times_the_provider_rate() -> None:
    pdf = pdf_bytes(3)
    assert pdf_page_count(pdf) == 3
    document = {
        "type": "document",
        "source": {"type": "base64", "media_type": "application/pdf", "data": b64(pdf)},
    }
    assert count_item("anthropic", {"role": "user", "content": [document]}, O200K) == 4 + 3 * 1_500
    inline = {"inlineData": {"mimeType": "application/pdf", "data": b64(pdf)}}
    assert count_item("gemini", {"role": "user", "parts": [inline]}, O200K) == 4 + 3 * 258
    file_part = {
        "type": "file",
        "file": {"filename": "a.pdf", "file_data": f"data:application/pdf;base64,{b64(pdf)}"},
    }
    assert (
        count_item("openai_chat", {"role": "user", "content": [file_part]}, O200K) == 4 + 3 * 1_500
    )


def test_pdf_pages_inside_compressed_object_streams_are_counted() -> None:
    packed = zlib.compress(
        b"1 0 << /Type /Page >> 2 0 << /Type /Pages /Count 2 >> 3 0 << /Type/Page >>"
    )
    pdf = (
        b"%PDF-1.7\n4 0 obj << /Type /ObjStm /N 3 /Filter /FlateDecode >>\nstream\r\n"
        + packed
        + b"\nendstream"
    )
    assert pdf_page_count(pdf) == 2


def test_pdf_without_a_page_tree_is_estimated_from_its_size() -> None:
    pdf = b"%PDF-1.7\n" + bytes(8_991)
    assert pdf_page_count(pdf) is None
    assert document_tokens("anthropic", pdf) == 3 * 1_500  # 9,000 bytes / 3,000 a page


def test_plain_text_document_costs_its_text() -> None:
    document = {
        "type": "document",
        "title": "Notes",
        "source": {"type": "text", "media_type": "text/plain", "data": "hello world"},
    }
    assert (
        count_item("anthropic", {"role": "user", "content": [document]}, O200K)
        == 4 + count_text("Notes") + 2
    )


def test_wav_audio_costs_its_duration() -> None:
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as writer:
        writer.setnchannels(1)
        writer.setsampwidth(2)
        writer.setframerate(16_000)
        writer.writeframes(bytes(64_000))  # two seconds
    audio = {
        "type": "input_audio",
        "input_audio": {"data": b64(buffer.getvalue()), "format": "wav"},
    }
    assert (
        count_item("openai_chat", {"role": "user", "content": [audio]}, O200K) == 4 + 21
    )  # 10 a second


# ------------------------------------------------------------------ text, tools, unknown blocks


def test_text_messages_cost_their_text_plus_overhead() -> None:
    text = "The quick brown fox jumps over the lazy dog."
    expected = MESSAGE_OVERHEAD + count_text(text)
    assert count_item("anthropic", {"role": "user", "content": text}, O200K) == expected
    assert (
        count_item(
            "anthropic", {"role": "user", "content": [{"type": "text", "text": text}]}, O200K
        )
        == expected
    )
    assert count_item("openai_chat", {"role": "user", "content": text}, O200K) == expected
    output = {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text}],
    }
    assert count_item("openai_responses", output, O200K) == expected
    assert count_item("gemini", {"role": "model", "parts": [{"text": text}]}, O200K) == expected


def test_tool_calls_cost_their_name_and_json_arguments() -> None:
    arguments = {"city": "Paris", "days": 3}
    compact = json.dumps(arguments, separators=(",", ":"))
    expected = MESSAGE_OVERHEAD + count_text("get_weather") + count_text(compact)
    anthropic = {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "t1", "name": "get_weather", "input": arguments}],
    }
    chat = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": compact},
            }
        ],
    }
    responses = {
        "type": "function_call",
        "call_id": "c1",
        "name": "get_weather",
        "arguments": compact,
    }
    gemini = {
        "role": "model",
        "parts": [{"functionCall": {"name": "get_weather", "args": arguments}}],
    }
    assert count_item("anthropic", anthropic, O200K) == expected
    assert count_item("openai_chat", chat, O200K) == expected
    assert count_item("openai_responses", responses, O200K) == expected
    assert count_item("gemini", gemini, O200K) == expected


def test_tool_results_cost_their_text_or_json() -> None:
    result = "Sunny, 24 degrees"
    expected = MESSAGE_OVERHEAD + count_text(result)
    block = {
        "type": "tool_result",
        "tool_use_id": "t1",
        "content": [{"type": "text", "text": result}],
    }
    assert count_item("anthropic", {"role": "user", "content": [block]}, O200K) == expected
    assert (
        count_item("openai_chat", {"role": "tool", "tool_call_id": "c1", "content": result}, O200K)
        == expected
    )
    output = {"type": "function_call_output", "call_id": "c1", "output": result}
    assert count_item("openai_responses", output, O200K) == expected
    response = {"functionResponse": {"name": "w", "response": {"result": result}}}
    json_cost = count_text("w") + count_text(json.dumps({"result": result}, separators=(",", ":")))
    assert count_item("gemini", {"role": "user", "parts": [response]}, O200K) == 4 + json_cost


def test_reasoning_items_cost_their_summary_only() -> None:
    item = {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [{"type": "summary_text", "text": "Checked the forecast."}],
        "encrypted_content": "gAAAA" * 2_000,
    }
    assert count_item("openai_responses", item, O200K) == 4 + count_text("Checked the forecast.")


def test_unknown_blocks_cost_their_json() -> None:
    block = {"type": "web_search_tool_result", "tool_use_id": "s1", "content": []}
    compact = json.dumps(block, separators=(",", ":"))
    assert count_item("anthropic", {"role": "user", "content": [block]}, O200K) == 4 + count_text(
        compact
    )
