"""Image decoding in the core against Pillow, the oracle: the same files
decoded by both (PNG and lossless WebP equal, JPEG and lossy WebP within a
stated tolerance), the resize equal to Pillow's BILINEAR, and hostile bytes
refused with one ValueError naming the field."""

import io
import pickle
import struct
import zlib

import numpy as np
import pytest

from shardkit import images

PIL = pytest.importorskip("PIL")
from PIL import Image  # noqa: E402

# libjpeg-turbo of this build vs the one in Pillow's wheel: same IDCT
# (accurate integer), possibly another version; stated in image_decode.h.
JPEG_MAX_DIFF = 2
JPEG_MEAN_DIFF = 0.05


def photo(h, w, seed=0):
    """Photo-like content: smooth gradients plus noise."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([x * 255 / max(w, 1), y * 255 / max(h, 1), (x + y) * 127 / max(h + w, 1)], -1)
    return np.clip(base + rng.normal(0, 12, (h, w, 3)), 0, 255).astype(np.uint8)


def encode(pixels, fmt, mode="RGB", **kw):
    im = Image.fromarray(pixels)
    if mode != "RGB":
        im = im.convert(mode)
    buf = io.BytesIO()
    im.save(buf, fmt, **kw)
    return buf.getvalue()


def pillow(data):
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


LOSSLESS = [
    ("PNG", "RGB", {}),
    ("PNG", "RGBA", {}),
    ("PNG", "L", {}),
    ("PNG", "LA", {}),
    ("PNG", "P", {}),
    ("PNG", "1", {}),
    ("PNG", "RGB", {"optimize": True}),
    ("WEBP", "RGB", {"lossless": True}),
    ("WEBP", "RGBA", {"lossless": True, "exact": True}),
]


@pytest.mark.parametrize("fmt,mode,kw", LOSSLESS)
@pytest.mark.parametrize("shape", [(1, 1), (37, 53), (240, 320)])
def test_lossless_images_equal_pillow(fmt, mode, kw, shape):
    data = encode(photo(*shape), fmt, mode, **kw)
    ours = images.decode_image(data)
    assert ours.dtype == np.uint8 and ours.shape == (*shape, 3)
    np.testing.assert_array_equal(ours, pillow(data))
    assert images.image_info(data)[1:] == shape


def test_interlaced_and_16_bit_png_equal_pillow():
    # Pillow writes neither; a 16-bit RGB PNG from raw rows (high byte kept by both)
    import struct
    import zlib

    h, w = 5, 7
    rng = np.random.default_rng(3)
    rows = rng.integers(0, 65536, (h, w, 3), dtype=np.uint16).astype(">u2")
    raw = b"".join(b"\x00" + rows[y].tobytes() for y in range(h))

    def chunk(kind, body):
        return (
            struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
        )

    data = (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 16, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )
    np.testing.assert_array_equal(images.decode_image(data), pillow(data))
    np.testing.assert_array_equal(images.decode_image(data), (rows >> 8).astype(np.uint8))


@pytest.mark.parametrize("subsampling", [0, 1, 2])
@pytest.mark.parametrize("extra", [{}, {"progressive": True}, {"mode": "L"}])
def test_jpeg_within_the_stated_tolerance_of_pillow(subsampling, extra):
    extra = dict(extra)
    mode = extra.pop("mode", "RGB")
    for shape in [(224, 224), (301, 517), (17, 9)]:
        data = encode(
            photo(*shape, seed=shape[0]), "JPEG", mode, quality=90, subsampling=subsampling, **extra
        )
        ours = images.decode_image(data).astype(int)
        theirs = pillow(data).astype(int)
        diff = np.abs(ours - theirs)
        assert diff.max() <= JPEG_MAX_DIFF and diff.mean() <= JPEG_MEAN_DIFF, (
            shape,
            diff.max(),
            diff.mean(),
        )


def test_lossy_webp_within_the_tolerance_of_pillow():
    data = encode(photo(200, 300), "WEBP", quality=80)
    diff = np.abs(images.decode_image(data).astype(int) - pillow(data).astype(int))
    assert diff.max() <= 2 and diff.mean() <= 0.05


@pytest.mark.parametrize(
    "src,dst",
    [
        ((37, 53), (224, 224)),
        ((1024, 768), (224, 224)),
        ((500, 333), (17, 400)),
        ((224, 224), (224, 112)),
        ((1, 1), (5, 3)),
        ((640, 480), (640, 240)),
        ((99, 98), (98, 99)),
    ],
)
def test_resize_equals_pillow_bilinear(src, dst):
    pixels = photo(*src, seed=7)
    ours = images.resize_bilinear(pixels, dst)
    theirs = np.asarray(Image.fromarray(pixels).resize((dst[1], dst[0]), Image.BILINEAR))
    np.testing.assert_array_equal(ours, theirs)


def test_decode_with_max_pixels_follows_the_rule_and_pillow():
    pixels = photo(1000, 600)
    data = encode(pixels, "PNG")
    out = images.decode_image(data, max_pixels=224 * 224)
    s = np.sqrt(224 * 224 / (1000 * 600))
    assert out.shape == (int(1000 * s), int(600 * s), 3)
    theirs = (
        Image.open(io.BytesIO(data))
        .convert("RGB")
        .resize((out.shape[1], out.shape[0]), Image.BILINEAR)
    )
    np.testing.assert_array_equal(out, np.asarray(theirs))
    assert images.decode_image(data, max_pixels=10**7).shape == (1000, 600, 3)


def test_batch_decoder_equals_one_by_one_in_order():
    files = [
        encode(photo(h, w, seed=h), fmt, **kw)
        for h, w, fmt, kw in [
            (100, 80, "PNG", {}),
            (300, 200, "JPEG", {"quality": 85}),
            (64, 64, "WEBP", {"lossless": True}),
            (500, 700, "JPEG", {}),
            (31, 47, "PNG", {}),
        ]
    ]
    for threads in (1, 3):
        fixed = images.ImageDecoder(size=(96, 128), threads=threads)(files)
        assert fixed["pixel_values"].shape == (5, 96, 128, 3)
        for i, f in enumerate(files):
            np.testing.assert_array_equal(
                fixed["pixel_values"][i], images.decode_image(f, size=(96, 128))
            )
        free = images.ImageDecoder(max_pixels=5000, threads=threads)(files)
        for i, f in enumerate(files):
            one = images.decode_image(f, max_pixels=5000)
            a, b = free["image_offsets"][i], free["image_offsets"][i + 1]
            np.testing.assert_array_equal(free["pixel_values"][a:b].reshape(one.shape), one)
            assert free["image_sizes"][i].tolist() == list(one.shape[:2])
    empty = images.ImageDecoder(size=(4, 4))([])
    assert empty["pixel_values"].shape == (0, 4, 4, 3)


def png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def filtered_png(pixels, filters, idat_parts=1, extra_chunks=()):
    """A PNG of `pixels` ([h, w, c] uint8, c = 1, 2, 3, 4: grey, grey+alpha,
    RGB, RGBA) whose row y is stored with PNG filter filters[y] (0-4, the PNG
    spec's definitions written here), its zlib stream cut into `idat_parts`
    IDAT chunks, `extra_chunks` (kind, data) inserted before the first IDAT."""
    h, w, c = pixels.shape
    rows = pixels.reshape(h, w * c).astype(np.int32)
    raw = bytearray()
    for y in range(h):
        x = rows[y]
        up = rows[y - 1] if y else np.zeros_like(x)
        left = np.concatenate([np.zeros(c, np.int32), x[:-c]])
        up_left = np.concatenate([np.zeros(c, np.int32), up[:-c]])
        p = left + up - up_left
        pa, pb, pc = np.abs(p - left), np.abs(p - up), np.abs(p - up_left)
        paeth = np.where((pa <= pb) & (pa <= pc), left, np.where(pb <= pc, up, up_left))
        pred = [0, left, up, (left + up) // 2, paeth][filters[y]]
        raw += bytes([filters[y]]) + ((x - pred) % 256).astype(np.uint8).tobytes()
    color = {1: 0, 2: 4, 3: 2, 4: 6}[c]
    stream = zlib.compress(bytes(raw), 6)
    cuts = np.linspace(0, len(stream), idat_parts + 1).astype(int)
    out = b"\x89PNG\r\n\x1a\n" + png_chunk(
        b"IHDR", struct.pack(">IIBBBBB", w, h, 8, color, 0, 0, 0)
    )
    for kind, data in extra_chunks:
        out += png_chunk(kind, data)
    for a, b in zip(cuts[:-1], cuts[1:]):
        out += png_chunk(b"IDAT", stream[a:b])
    return out + png_chunk(b"tEXt", b"after\0the data") + png_chunk(b"IEND", b"")


@pytest.mark.parametrize("channels", [1, 2, 3, 4])
@pytest.mark.parametrize("shape", [(1, 1), (5, 2), (61, 47)])
def test_png_every_filter_and_colour_type_equals_pillow(channels, shape):
    """The PNG path through libdeflate (8-bit, not interlaced files) unfilters
    and converts as Pillow: every filter type on every colour type, the data
    in one or several IDAT chunks, ancillary chunks before and after."""
    rng = np.random.default_rng(channels * 100 + shape[0])
    pixels = photo(*shape, seed=channels)
    pixels = np.concatenate([pixels, pixels[..., :1] // 3], -1)[..., :channels]
    if channels <= 2:  # grey (+ alpha): the photo's first channel (+ a second)
        pixels = np.stack([pixels[..., 0], pixels[..., -1]], -1)[..., :channels]
    for filters in ([k] * shape[0] for k in range(5)):
        for parts in (1, 3):
            data = filtered_png(pixels, filters, parts, [(b"tEXt", b"k\0v"), (b"pHYs", bytes(9))])
            theirs = Image.open(io.BytesIO(data))
            assert np.array_equal(np.asarray(theirs).reshape(pixels.shape), pixels)  # the encoder
            np.testing.assert_array_equal(images.decode_image(data), pillow(data))
    mixed = filtered_png(pixels, list(rng.integers(0, 5, shape[0])), 2)
    np.testing.assert_array_equal(images.decode_image(mixed), pillow(mixed))
    np.testing.assert_array_equal(
        images.decode_image(mixed, size=(7, 9)),
        np.asarray(Image.open(io.BytesIO(mixed)).convert("RGB").resize((9, 7), Image.BILINEAR)),
    )


def test_images_over_the_kept_buffer_size_decode_as_pillow():
    """A thread keeps its decode buffers between images up to 4 MiB each; a
    larger image (here 4.3 MB of pixels, then a small one, then again)
    decodes through freshly allocated buffers to the same pixels."""
    for fmt in ("PNG", "JPEG"):
        big, small = encode(photo(1300, 1100, seed=3), fmt), encode(photo(40, 30, seed=4), fmt)
        for data in (big, small, big):
            theirs = Image.open(io.BytesIO(data)).convert("RGB").resize((97, 101), Image.BILINEAR)
            diff = np.abs(images.decode_image(data, size=(101, 97)).astype(int) - theirs)
            assert diff.max() <= (0 if fmt == "PNG" else JPEG_MAX_DIFF)


def test_png_files_off_the_fast_path_keep_libpng_rules():
    """What the libdeflate path does not take goes to libpng, as before: an
    ancillary chunk with a bad CRC is skipped (libpng's default), a data chunk
    with a bad CRC, a filter type over 4 or short data is refused."""
    pixels = photo(30, 20)
    good = filtered_png(pixels, [4] * 30)
    bad_ancillary = bytearray(filtered_png(pixels, [4] * 30, extra_chunks=[(b"tEXt", b"k\0v")]))
    at = bad_ancillary.find(b"tEXt") + 4 + 3  # the CRC after "k\0v"
    bad_ancillary[at] ^= 1
    np.testing.assert_array_equal(images.decode_image(bytes(bad_ancillary)), pillow(good))
    bad_idat = bytearray(good)
    bad_idat[bad_idat.find(b"IDAT") + 4] ^= 1  # a flipped data byte under the chunk's CRC
    at = good.find(b"IDAT")
    raw = bytearray(
        zlib.decompress(good[at + 4 : at + 4 + int.from_bytes(good[at - 4 : at], "big")])
    )
    raw[0] = 5  # filter type 5 does not exist
    bad_filter = good[:33] + png_chunk(b"IDAT", zlib.compress(bytes(raw))) + png_chunk(b"IEND", b"")
    short = good[:33] + png_chunk(b"IDAT", zlib.compress(bytes(raw[:-1]))) + png_chunk(b"IEND", b"")
    for data in (bytes(bad_idat), bad_filter, short):
        with pytest.raises(ValueError, match=r"^image: png data does not decode: "):
            images.decode_image(data)


def pillow_draft(data, size):
    """Pillow with its JPEG draft mode: DCT-scaled decode, then BILINEAR."""
    im = Image.open(io.BytesIO(data))
    im.draft("RGB", (size[1], size[0]))
    return np.asarray(im.convert("RGB").resize((size[1], size[0]), Image.BILINEAR))


@pytest.mark.parametrize(
    "shape,size,kw",
    [
        ((600, 800), (224, 224), {}),  # 1/2
        ((1000, 480), (224, 112), {"subsampling": 0}),  # 1/4
        ((1800, 1900), (224, 224), {}),  # 1/8
        ((700, 500), (100, 70), {"subsampling": 1}),  # 1/4 (4:2:2)
        ((300, 420), (224, 224), {}),  # under 2x: no draft
        ((64, 64), (5, 7), {}),  # 1/8: 8 x 8
    ],
)
def test_jpeg_draft_equals_pillows_draft(shape, size, kw):
    """jpeg_draft=True is Pillow's im.draft("RGB", size) before the resize
    (within the JPEG tolerance), one by one and in a batch; it is a mode with
    other pixels than the exact path (for a JPEG at least twice the target)."""
    data = encode(photo(*shape), "JPEG", quality=90, **kw)
    ours = images.decode_image(data, size=size, jpeg_draft=True)
    theirs = pillow_draft(data, size)
    diff = np.abs(ours.astype(int) - theirs.astype(int))
    assert diff.max() <= JPEG_MAX_DIFF and diff.mean() <= JPEG_MEAN_DIFF, (diff.max(), diff.mean())
    batch = images.ImageDecoder(size=size, threads=2, jpeg_draft=True)([data, data])
    np.testing.assert_array_equal(batch["pixel_values"][1], ours)
    exact = images.decode_image(data, size=size)
    if min(shape[0] // size[0], shape[1] // size[1]) >= 2:
        assert not np.array_equal(exact, ours)
    else:
        np.testing.assert_array_equal(exact, ours)


def test_jpeg_draft_leaves_other_formats_and_grey_jpeg_to_their_rules():
    png = encode(photo(600, 500), "PNG")
    np.testing.assert_array_equal(
        images.decode_image(png, size=(100, 100), jpeg_draft=True),
        images.decode_image(png, size=(100, 100)),
    )
    grey = encode(photo(600, 500), "JPEG", "L")
    ours = images.decode_image(grey, max_pixels=100 * 80, jpeg_draft=True)
    theirs = pillow_draft(grey, ours.shape[:2])
    assert np.abs(ours.astype(int) - theirs.astype(int)).max() <= JPEG_MAX_DIFF
    d = images.ImageDecoder(size=(50, 50), jpeg_draft=True)
    d2 = pickle.loads(pickle.dumps(d))
    assert d2.jpeg_draft is True
    np.testing.assert_array_equal(d([grey])["pixel_values"], d2([grey])["pixel_values"])


def test_hostile_bytes_are_one_error_naming_the_field():
    good = encode(photo(64, 48), "JPEG")
    png = encode(photo(64, 48), "PNG")
    webp = encode(photo(64, 48), "WEBP")
    for data in (good, png, webp):
        # Pillow (LOAD_TRUNCATED_IMAGES off) is the oracle: a prefix that it
        # refuses is refused, one that it decodes decodes to the same pixels.
        for cut in sorted({0, 5, 20, len(data) // 2} | set(range(len(data) - 16, len(data)))):
            try:
                theirs = pillow(data[:cut])
            except Exception:  # Pillow raises OSError, SyntaxError, ...
                theirs = None
            # Stricter than Pillow in one place, stated in image_decode.h: a PNG
            # cut in the last 8 bytes before IEND (the zlib and chunk checksums)
            # is refused; Pillow decodes it (its pixels are whole).
            iend = data.find(b"IEND") - 4 if data is png else -1
            if theirs is None or iend - 8 <= cut < iend:
                with pytest.raises(ValueError, match=r"^images: sample 3, image 0: "):
                    images.ImageDecoder(threads=2)([png, data[:cut]], samples=[2, 3])
            else:
                np.testing.assert_array_equal(images.decode_image(data[:cut]), theirs)
    with pytest.raises(
        ValueError, match=r"^image: not a JPEG, PNG or WebP image \(first bytes 47 49 46"
    ):
        images.decode_image(b"GIF89a\x01\x00\x01\x00")
    huge = bytearray(png)
    huge[16:24] = (60000).to_bytes(4, "big") + (60000).to_bytes(4, "big")
    with pytest.raises(ValueError, match="60000 x 60000 pixels is over the limit of 178956970"):
        images.image_info(bytes(huge))
    with pytest.raises(ValueError, match="over the limit of 100 pixels"):
        images.decode_image(png, pixel_limit=100)
    rng = np.random.default_rng(0)
    for data in (good, png, webp):  # flipped bytes: an image or a ValueError, never a crash
        for _ in range(200):
            b = bytearray(data)
            for i in rng.integers(0, len(b), 3):
                b[i] ^= int(rng.integers(1, 256))
            try:
                out = images.decode_image(bytes(b))
                assert out.shape[2] == 3
            except ValueError:
                pass
    with pytest.raises(ValueError, match="^size: "):
        images.ImageDecoder(size=(0, 3))
    with pytest.raises(ValueError, match="^images: expected the encoded bytes"):
        images.ImageDecoder()([123])


def test_decoder_pickles_for_dataloader_workers():
    d = images.ImageDecoder(size=(8, 8), threads=2)
    d2 = pickle.loads(pickle.dumps(d))
    data = encode(photo(20, 20), "PNG")
    np.testing.assert_array_equal(d(data and [data])["pixel_values"], d2([data])["pixel_values"])
    assert d2.threads == 2


def test_resize_equals_pillow_on_random_sizes():
    rng = np.random.default_rng(11)
    for _ in range(40):
        src = tuple(int(v) for v in rng.integers(1, 700, 2))
        dst = tuple(int(v) for v in rng.integers(1, 400, 2))
        pixels = photo(*src, seed=int(rng.integers(1000)))
        theirs = np.asarray(Image.fromarray(pixels).resize((dst[1], dst[0]), Image.BILINEAR))
        np.testing.assert_array_equal(
            images.resize_bilinear(pixels, dst), theirs, err_msg=f"{src}->{dst}"
        )


def test_regression_a_valid_jpeg_after_a_corrupt_one_decodes():
    """libjpeg-turbo 2.1 kept a failed decompressor's state: every JPEG decoded
    on that thread after a corrupt one failed with "Bogus marker length"."""
    good = encode(photo(40, 30), "JPEG")
    for bad in (good[: len(good) // 2], good[:20], b"\xff\xd8\xff" + b"\x00" * 50):
        with pytest.raises(ValueError):
            images.decode_image(bad)
        np.testing.assert_array_equal(images.decode_image(good), pillow(good))
        assert images.image_info(good) == ("jpeg", 40, 30)
    decoder = images.ImageDecoder(threads=2)
    with pytest.raises(ValueError):
        decoder([good, good[:100], good])
    assert decoder([good] * 4)["pixel_values"].size == 4 * 40 * 30 * 3
