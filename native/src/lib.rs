//! Kafka record batches (message format v2) decoded into records in one call per fetched
//! partition, for the dedupe worker's consumer (`adapters/fetched_records.py`).
//! `message_ids` (its rules in `message_id.rs`) finds a batch's messageIds for the worker's
//! decision without a JSON parse per record. `BatchBuilder` (`batch_builder.rs`) builds the
//! record batches the worker writes.
//!
//! The reference is aiokafka's `PartitionRecords._unpack_records` (aiokafka/consumer/fetcher.py)
//! over its `DefaultRecordBatch` (aiokafka/record/default_records.py), itself following the Java
//! client's `CompletedFetch.nextFetchedRecord` (clients/.../internals/CompletedFetch.java): the
//! same batches skipped (aborted transactions under read_committed, control batches), the same
//! records (an offset below the fetch position skipped), the same `next_fetch_offset`. Where
//! aiokafka would raise (a bad CRC, a corrupt or truncated record, a codec error, a record
//! format older than v2, a header key that is not UTF-8) this module decodes nothing and says so
//! (`None`): the caller then runs aiokafka's own loop over the same bytes, which yields the same
//! records before raising the same error. So this path only ever answers what aiokafka answers.

mod batch_builder;
mod message_id;

use std::collections::HashSet;
use std::io::Read;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString, PyTuple};

/// `LOG_OVERHEAD`: base offset (8) and batch length (4), before every batch.
const LOG_OVERHEAD: usize = 12;
/// aiokafka's `MemoryRecords.MIN_SLICE`: the log overhead and a v0 record's overhead (14).
const MIN_SLICE: usize = LOG_OVERHEAD + 14;
/// The v2 batch header: base offset .. records count (`DefaultRecordBase.HEADER_STRUCT`).
const HEADER_SIZE: usize = 61;
const MAGIC_OFFSET: usize = 16;
const CRC_OFFSET: usize = 17;
const ATTRIBUTES_OFFSET: usize = 21;

const CODEC_MASK: i16 = 0x07;
const TIMESTAMP_TYPE_MASK: i16 = 0x08;
const TRANSACTIONAL_MASK: i16 = 0x10;
const CONTROL_MASK: i16 = 0x20;

/// The 16-byte header of xerial's framed snappy stream (the Java client's SnappyOutputStream):
/// marker -126, "SNAPPY", 0, version 1, compatible version 1 (aiokafka's `_XERIAL_V1_HEADER`).
const XERIAL_HEADER: [u8; 16] = [
    0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0, 0, 0, 0, 1, 0, 0, 0, 1,
];

/// Anything aiokafka would refuse; the caller falls back to aiokafka's own loop.
struct Refused;

type Decoded<T> = Result<T, Refused>;

/// A fetched record, with the attributes of aiokafka's `ConsumerRecord` (read-only). Each value
/// is made into a Python object once, when the record is decoded, so reading an attribute
/// allocates nothing.
#[pyclass(frozen, module = "dedupe_native", name = "Record")]
struct Record {
    #[pyo3(get)]
    topic: Py<PyString>,
    #[pyo3(get)]
    partition: Py<PyAny>,
    #[pyo3(get)]
    offset: Py<PyAny>,
    #[pyo3(get)]
    timestamp: Py<PyAny>,
    #[pyo3(get)]
    timestamp_type: i64,
    #[pyo3(get)]
    key: Option<Py<PyBytes>>,
    #[pyo3(get)]
    value: Option<Py<PyBytes>>,
    #[pyo3(get)]
    headers: Py<PyTuple>,
    key_size: i64,
    value_size: i64,
}

#[pymethods]
impl Record {
    /// Always None for message format v2, as in aiokafka's record (deprecated there).
    #[getter]
    fn checksum(&self) -> Option<i64> {
        None
    }

    #[getter]
    fn serialized_key_size(&self) -> i64 {
        self.key_size
    }

    #[getter]
    fn serialized_value_size(&self) -> i64 {
        self.value_size
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!(
            "Record(topic={}, partition={}, offset={}, timestamp={}, timestamp_type={}, key={}, \
             value={}, headers={})",
            self.topic.bind(py).repr()?,
            self.partition.bind(py),
            self.offset.bind(py),
            self.timestamp.bind(py),
            self.timestamp_type,
            match &self.key {
                Some(k) => k.bind(py).repr()?.to_string(),
                None => "None".to_string(),
            },
            match &self.value {
                Some(v) => v.bind(py).repr()?.to_string(),
                None => "None".to_string(),
            },
            self.headers.bind(py).repr()?,
        ))
    }
}

fn be_i16(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}

fn be_i32(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn be_i64(b: &[u8], at: usize) -> i64 {
    i64::from_be_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fn be_u32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

/// A zig-zag varint (Kafka's varint and varlong: at most ten bytes).
fn varint(b: &[u8], pos: &mut usize) -> Decoded<i64> {
    let mut raw: u64 = 0;
    let mut shift = 0u32;
    loop {
        let byte = *b.get(*pos).ok_or(Refused)?;
        *pos += 1;
        raw |= u64::from(byte & 0x7F) << shift;
        if byte & 0x80 == 0 {
            break;
        }
        shift += 7;
        if shift > 63 {
            return Err(Refused);
        }
    }
    Ok(((raw >> 1) as i64) ^ -((raw & 1) as i64))
}

/// `len` bytes at `pos` (a length of -1 or less: null), as aiokafka's record reader slices them.
fn span<'a>(b: &'a [u8], pos: &mut usize, len: i64) -> Decoded<Option<&'a [u8]>> {
    if len < 0 {
        return Ok(None);
    }
    let len = usize::try_from(len).map_err(|_| Refused)?;
    let end = pos.checked_add(len).ok_or(Refused)?;
    let out = b.get(*pos..end).ok_or(Refused)?;
    *pos = end;
    Ok(Some(out))
}

/// The decompression state a fetch reuses across its batches: a zstd context costs more to
/// create than a small batch costs to decompress.
#[derive(Default)]
struct Codecs {
    zstd: Option<zstd::bulk::Decompressor<'static>>,
}

fn decompress(codecs: &mut Codecs, codec: i16, data: &[u8]) -> Decoded<Vec<u8>> {
    let mut out = Vec::with_capacity(data.len() * 4);
    match codec {
        1 => {
            flate2::read::MultiGzDecoder::new(data)
                .read_to_end(&mut out)
                .map_err(|_| Refused)?;
        }
        2 => {
            if data.len() >= 16 && data[..16] == XERIAL_HEADER {
                let mut at = 16;
                while at < data.len() {
                    let size = usize::try_from(be_i32(data.get(at..at + 4).ok_or(Refused)?, 0))
                        .map_err(|_| Refused)?;
                    at += 4;
                    let block = data.get(at..at + size).ok_or(Refused)?;
                    out.extend(
                        snap::raw::Decoder::new()
                            .decompress_vec(block)
                            .map_err(|_| Refused)?,
                    );
                    at += size;
                }
            } else {
                out = snap::raw::Decoder::new()
                    .decompress_vec(data)
                    .map_err(|_| Refused)?;
            }
        }
        3 => {
            lz4_flex::frame::FrameDecoder::new(data)
                .read_to_end(&mut out)
                .map_err(|_| Refused)?;
        }
        4 => {
            // One call into a buffer of the frame's size when the frame states it (aiokafka's
            // and the Java client's compressors do); the streaming decoder otherwise.
            if let Ok(Some(size)) = zstd::zstd_safe::get_frame_content_size(data) {
                let size = usize::try_from(size).map_err(|_| Refused)?;
                if codecs.zstd.is_none() {
                    codecs.zstd = Some(zstd::bulk::Decompressor::new().map_err(|_| Refused)?);
                }
                let context = codecs.zstd.as_mut().ok_or(Refused)?;
                return context.decompress(data, size).map_err(|_| Refused);
            }
            zstd::stream::read::Decoder::new(data)
                .map_err(|_| Refused)?
                .read_to_end(&mut out)
                .map_err(|_| Refused)?;
        }
        _ => return Err(Refused),
    }
    Ok(out)
}

/// One v2 batch's header fields that the loop reads.
struct Batch<'a> {
    base_offset: i64,
    attributes: i16,
    last_offset_delta: i32,
    first_timestamp: i64,
    max_timestamp: i64,
    producer_id: i64,
    count: i32,
    body: &'a [u8],
}

impl Batch<'_> {
    fn next_offset(&self) -> i64 {
        self.base_offset + i64::from(self.last_offset_delta) + 1
    }

    fn is_control(&self) -> bool {
        self.attributes & CONTROL_MASK != 0
    }

    fn is_transactional(&self) -> bool {
        self.attributes & TRANSACTIONAL_MASK != 0
    }

    fn log_append_time(&self) -> bool {
        self.attributes & TIMESTAMP_TYPE_MASK != 0
    }
}

/// One record's fields, borrowed from the batch's (decompressed) bytes.
struct Fields<'a> {
    offset: i64,
    timestamp: i64,
    key: Option<&'a [u8]>,
    value: Option<&'a [u8]>,
    headers: Vec<(&'a str, Option<&'a [u8]>)>,
}

/// The record at `pos` (aiokafka's `_DefaultRecordBatchPy._read_msg`).
fn read_record<'a>(b: &'a [u8], pos: &mut usize, batch: &Batch<'_>) -> Decoded<Fields<'a>> {
    let length = varint(b, pos)?;
    let start = *pos;
    varint(b, pos)?; // attributes: unused in v2
    let ts_delta = varint(b, pos)?;
    let timestamp = if batch.log_append_time() {
        batch.max_timestamp
    } else {
        batch.first_timestamp.checked_add(ts_delta).ok_or(Refused)?
    };
    let offset_delta = varint(b, pos)?;
    let offset = batch.base_offset.checked_add(offset_delta).ok_or(Refused)?;
    let key_len = varint(b, pos)?;
    let key = span(b, pos, key_len)?;
    let value_len = varint(b, pos)?;
    let value = span(b, pos, value_len)?;
    let header_count = varint(b, pos)?;
    if header_count < 0 {
        return Err(Refused);
    }
    let mut headers = Vec::new();
    for _ in 0..header_count {
        let key_len = varint(b, pos)?;
        if key_len < 0 {
            return Err(Refused);
        }
        let key = span(b, pos, key_len)?.ok_or(Refused)?;
        let key = std::str::from_utf8(key).map_err(|_| Refused)?;
        let value_len = varint(b, pos)?;
        headers.push((key, span(b, pos, value_len)?));
    }
    if i64::try_from(*pos - start).map_err(|_| Refused)? != length {
        return Err(Refused);
    }
    Ok(Fields {
        offset,
        timestamp,
        key,
        value,
        headers,
    })
}

/// The batch at the front of `rest` and what follows it; None when `rest` holds no whole batch
/// (a fetch ends with a partial one: aiokafka's `MemoryRecords.has_next` is false there).
fn next_batch(rest: &[u8]) -> Decoded<Option<(Batch<'_>, &[u8])>> {
    if rest.len() < LOG_OVERHEAD {
        return Ok(None);
    }
    let length = i64::from(be_i32(rest, 8));
    let end = LOG_OVERHEAD as i64 + length;
    if end > rest.len() as i64 {
        return Ok(None);
    }
    let end = usize::try_from(end).map_err(|_| Refused)?;
    let (slice, after) = rest.split_at(end);
    if slice.len() < MIN_SLICE || slice[MAGIC_OFFSET] != 2 || slice.len() < HEADER_SIZE {
        return Err(Refused); // corrupt, or an older record format: aiokafka decodes it
    }
    // Always checked: only a batch its CRC vouches for is decoded here, so a corrupt one never
    // meets this module's codecs, which may accept what aiokafka's refuse.
    if crc32c::crc32c(&slice[ATTRIBUTES_OFFSET..]) != be_u32(slice, CRC_OFFSET) {
        return Err(Refused);
    }
    let batch = Batch {
        base_offset: be_i64(slice, 0),
        attributes: be_i16(slice, ATTRIBUTES_OFFSET),
        last_offset_delta: be_i32(slice, 23),
        first_timestamp: be_i64(slice, 27),
        max_timestamp: be_i64(slice, 35),
        producer_id: be_i64(slice, 43),
        count: be_i32(slice, 57),
        body: &slice[HEADER_SIZE..],
    };
    Ok(Some((batch, after)))
}

/// Whether a control batch holds an abort marker (aiokafka's `_contains_abort_marker`: the first
/// record's key is `ControlRecord(version=0, type=0)`).
fn holds_abort_marker(batch: &Batch<'_>) -> Decoded<bool> {
    // aiokafka reads a control batch's first record without decompressing it; brokers write
    // control batches uncompressed, and one that is not is left to aiokafka.
    if batch.count <= 0 || batch.attributes & CODEC_MASK != 0 {
        return Err(Refused);
    }
    let mut pos = 0;
    let first = read_record(batch.body, &mut pos, batch)?;
    let key = first.key.ok_or(Refused)?;
    if key.len() < 4 {
        return Err(Refused);
    }
    Ok(be_i16(key, 0) == 0 && be_i16(key, 2) == 0)
}

/// What the loop does with one batch of the fetch.
enum Step<'a> {
    /// Skip it (aborted, or a control batch): the fetch position moves past it.
    Skip(i64),
    /// Read its records: the batch and, when compressed, its records' bytes decompressed.
    Read(Batch<'a>, Option<Vec<u8>>),
}

/// The batches of a fetch and what to do with each (aiokafka's `_unpack_records` up to reading
/// a batch's records).
fn plan(buf: &[u8], mut aborted: Vec<(i64, i64)>, read_committed: bool) -> Decoded<Vec<Step<'_>>> {
    // aiokafka sorts the aborted transactions by first offset and consumes them in order.
    aborted.sort_by_key(|&(_, first)| first);
    let mut aborted = aborted.into_iter().peekable();
    let mut aborted_producers: HashSet<i64> = HashSet::new();
    let mut steps = Vec::new();
    let mut codecs = Codecs::default();
    let mut rest = buf;
    while let Some((batch, after)) = next_batch(rest)? {
        rest = after;
        // v2 batches always carry a producer id field (-1: none), so aiokafka's
        // `producer_id is not None` holds for every one of them. Aborted transactions are taken
        // up to the batch's base offset (aiokafka), the Java client's up to its last offset: the
        // same set, as a transaction's first offset is the base offset of its first batch.
        if read_committed {
            while let Some(&(producer, first)) = aborted.peek() {
                if first > batch.base_offset {
                    break;
                }
                aborted_producers.insert(producer);
                aborted.next();
            }
            if batch.is_control() && holds_abort_marker(&batch)? {
                aborted_producers.remove(&batch.producer_id);
            }
            if batch.is_transactional() && aborted_producers.contains(&batch.producer_id) {
                steps.push(Step::Skip(batch.next_offset()));
                continue;
            }
        }
        if batch.is_control() {
            steps.push(Step::Skip(batch.next_offset()));
            continue;
        }
        let body = match batch.attributes & CODEC_MASK {
            0 => None,
            codec => Some(decompress(&mut codecs, codec, batch.body)?),
        };
        steps.push(Step::Read(batch, body));
    }
    Ok(steps)
}

fn py_bytes(py: Python<'_>, b: Option<&[u8]>) -> Option<Py<PyBytes>> {
    b.map(|b| PyBytes::new(py, b).unbind())
}

/// Decode a fetched partition's record set.
///
/// Returns `(records, next_fetch_offset)`: the records aiokafka's `PartitionRecords` would yield,
/// in order, and its `next_fetch_offset` once all are consumed; or None where aiokafka would
/// raise or meets a format this module leaves to it (see the module's doc). Every batch's CRC
/// is checked: the caller decodes here only for a consumer that checks CRCs (the default).
#[pyfunction]
#[pyo3(signature = (buf, topic, partition, fetch_offset, aborted, read_committed))]
#[allow(clippy::too_many_arguments)]
fn unpack<'py>(
    py: Python<'py>,
    buf: &[u8],
    topic: Bound<'py, PyString>,
    partition: Bound<'py, PyAny>,
    fetch_offset: i64,
    aborted: Vec<(i64, i64)>,
    read_committed: bool,
) -> PyResult<Option<(Bound<'py, PyList>, i64)>> {
    let Ok(steps) = plan(buf, aborted, read_committed) else {
        return Ok(None);
    };
    let topic = topic.unbind();
    let partition = partition.unbind();
    let empty = PyTuple::empty(py).unbind();
    let list = PyList::empty(py);
    let mut next_fetch_offset = fetch_offset;
    for step in &steps {
        let (batch, body) = match step {
            Step::Skip(next) => {
                next_fetch_offset = *next;
                continue;
            }
            Step::Read(batch, body) => (batch, body),
        };
        let bytes: &[u8] = body.as_deref().unwrap_or(batch.body);
        let timestamp_type = i64::from(batch.log_append_time());
        let mut pos = 0;
        for _ in 0..batch.count.max(0) {
            let Ok(f) = read_record(bytes, &mut pos, batch) else {
                return Ok(None);
            };
            if f.offset < next_fetch_offset {
                continue; // below the fetch position: part of a batch fetched before
            }
            next_fetch_offset = f.offset + 1;
            let headers = if f.headers.is_empty() {
                empty.clone_ref(py)
            } else {
                let mut items = Vec::with_capacity(f.headers.len());
                for (k, v) in &f.headers {
                    let value: Py<PyAny> = match v {
                        Some(v) => PyBytes::new(py, v).into_any().unbind(),
                        None => py.None(),
                    };
                    items.push(PyTuple::new(
                        py,
                        [PyString::new(py, k).into_any().unbind(), value],
                    )?);
                }
                PyTuple::new(py, items)?.unbind()
            };
            let record = Record {
                topic: topic.clone_ref(py),
                partition: partition.clone_ref(py),
                offset: f.offset.into_pyobject(py)?.into_any().unbind(),
                timestamp: f.timestamp.into_pyobject(py)?.into_any().unbind(),
                timestamp_type,
                key_size: f.key.map_or(-1, |k| k.len() as i64),
                value_size: f.value.map_or(-1, |v| v.len() as i64),
                key: py_bytes(py, f.key),
                value: py_bytes(py, f.value),
                headers,
            };
            list.append(Bound::new(py, record)?)?;
        }
        if pos != bytes.len() {
            return Ok(None); // unconsumed bytes after the batch's records
        }
        next_fetch_offset = batch.next_offset();
    }
    Ok(Some((list, next_fetch_offset)))
}

/// The messageIds of a batch of records, in order: each the id's bytes where the scan is
/// certain `app.rules.inspect` finds the value valid with that id (`message_id.rs`), else None
/// (the caller inspects that value). A record keyed by its id gets its own key object back, so
/// the caller's key-against-id comparison is an identity check.
#[pyfunction]
fn message_ids<'py>(
    py: Python<'py>,
    records: &Bound<'py, PyList>,
    max_event_bytes: usize,
    max_id_bytes: usize,
) -> PyResult<Bound<'py, PyList>> {
    let mut ids: Vec<Bound<'py, PyAny>> = Vec::with_capacity(records.len());
    for item in records.iter() {
        let (key, value) = match item.cast::<Record>() {
            Ok(record) => {
                let r = record.get();
                (
                    r.key.as_ref().map(|k| k.bind(py).clone()),
                    r.value.as_ref().map(|v| v.bind(py).clone()),
                )
            }
            // aiokafka's ConsumerRecord (the fallback decoder) or any record with the fields.
            Err(_) => (
                item.getattr("key")?.cast_into::<PyBytes>().ok(),
                item.getattr("value")?.cast_into::<PyBytes>().ok(),
            ),
        };
        let found = value
            .as_ref()
            .and_then(|v| message_id::message_id(v.as_bytes(), max_event_bytes, max_id_bytes));
        ids.push(match (found, key) {
            (None, _) => py.None().into_bound(py),
            (Some(id), Some(key)) if key.as_bytes() == id => key.into_any(),
            (Some(id), _) => PyBytes::new(py, id).into_any(),
        });
    }
    PyList::new(py, ids)
}

#[pymodule]
fn dedupe_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Record>()?;
    m.add_class::<batch_builder::BatchBuilder>()?;
    m.add_function(wrap_pyfunction!(unpack, m)?)?;
    m.add_function(wrap_pyfunction!(message_ids, m)?)?;
    Ok(())
}
