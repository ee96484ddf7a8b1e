"""Which tag summaries to keep, and which of them are stale.

Contract:

- ``tag_cover(segments, tag_counts)`` returns tags whose segments together
  include every segment that has a tag (segments with no tags are ignored). It
  is the greedy set cover: each step takes the tag covering the most segments
  not yet covered; ties go to the more specific tag (fewer segments in all:
  ``tag_counts[tag]`` when given, else the segments it labels here), then to
  the name. Tags come back in the order chosen.
- ``summaries_to_rebuild(cover, covered_until, segment_ends)`` keeps, in cover
  order, the tags whose newest segment ends past what their existing summary
  covers (``covered_until``; a tag missing there has no summary yet). A tag with
  no known segment end has nothing to summarise.
"""

from __future__ import annotations


def tag_cover(segments: dict[int, set[str]], tag_counts: dict[str, int] | None = None) -> list[str]:
    """Greedy set cover of the tagged segments by tags (see the module docstring)."""
    labelled: dict[str, set[int]] = {}
    for segment_id, tags in segments.items():
        for tag in tags:
            labelled.setdefault(tag, set()).add(segment_id)
    totals = {tag: len(ids) for tag, ids in labelled.items()}
    if tag_counts:
        totals.update({tag: tag_counts[tag] for tag in labelled if tag in tag_counts})
    uncovered = {segment_id for segment_id, tags in segments.items() if tags}
    cover: list[str] = []
    while uncovered:
        best = min(labelled, key=lambda tag: (-len(labelled[tag] & uncovered), totals[tag], tag))
        cover.append(best)
        uncovered -= labelled.pop(best)
    return cover


def summaries_to_rebuild(
    cover: list[str], covered_until: dict[str, int], segment_ends: dict[str, int]
) -> list[str]:
    """The tags of ``cover`` whose summary is missing or older than their newest segment."""
    stale: list[str] = []
    for tag in cover:
        newest = segment_ends.get(tag)
        if newest is None:
            continue
        if tag not in covered_until or newest > covered_until[tag]:
            stale.append(tag)
    return stale
