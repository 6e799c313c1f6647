//! A record batch (message format v2) built for the producer: the clean, dead-letter and
//! changelog records the worker writes, appended one call each into one buffer, then compressed,
//! given their header and CRC once, when the producer drains the batch.
//!
//! The reference is aiokafka's `BatchBuilder` (aiokafka/producer/message_accumulator.py) over its
//! `DefaultRecordBatchBuilder` (aiokafka/record/default_records.py), itself the Java client's
//! `MemoryRecordsBuilder` (clients/.../common/record/MemoryRecordsBuilder.java) with
//! `DefaultRecord.writeTo`: the same record bytes, the same refusal of a record that would fill
//! the batch to its size (never the first one; aiokafka's compiled builder, which is the one that
//! runs, refuses a record that would reach the size exactly, one byte before the Java client),
//! the same header fields, and the records compressed whenever a codec is set (as both do). So an
//! uncompressed batch is the same bytes as aiokafka's for the same records, and a compressed one
//! the same records. Only the codecs the
//! worker writes by default (none; zstd for the changelogs) are built here: `adapters/
//! built_batches.py` keeps aiokafka's builder for the others.
//!
//! The producer calls, as it does on aiokafka's builder: `_set_producer_state` when it drains the
//! batch into a Produce request, then `_build` (again on a retry: the built bytes are kept).

use std::time::{SystemTime, UNIX_EPOCH};

use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString, PyTuple};

use crate::{ATTRIBUTES_OFFSET, CRC_OFFSET, HEADER_SIZE, LOG_OVERHEAD, TRANSACTIONAL_MASK};

const CODEC_NONE: i16 = 0;
const CODEC_ZSTD: i16 = 4;
/// zstd's own default level, as aiokafka's `zstd_encode` (cramjam) and the Java client use it.
const ZSTD_LEVEL: i32 = 3;
/// `DefaultRecordBatch.NO_PARTITION_LEADER_EPOCH`: the broker sets it.
const NO_PARTITION_LEADER_EPOCH: i32 = -1;

/// Kafka's varints are zigzag-encoded: small negative numbers stay short.
fn zigzag(value: i64) -> u64 {
    ((value << 1) ^ (value >> 63)) as u64
}

fn put_varint(buf: &mut Vec<u8>, value: i64) {
    let mut v = zigzag(value);
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

fn varint_len(value: i64) -> usize {
    let mut v = zigzag(value);
    let mut n = 1;
    while v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
}

fn put_bytes(buf: &mut Vec<u8>, b: Option<&[u8]>) {
    match b {
        Some(b) => {
            put_varint(buf, b.len() as i64);
            buf.extend_from_slice(b);
        }
        None => put_varint(buf, -1),
    }
}

fn bytes_arg<'a>(what: &str, obj: &'a Bound<'_, PyAny>) -> PyResult<Option<&'a [u8]>> {
    if obj.is_none() {
        return Ok(None);
    }
    match obj.cast::<PyBytes>() {
        Ok(b) => Ok(Some(b.as_bytes())),
        Err(_) => Err(PyTypeError::new_err(format!(
            "Not supported type for {what}: {}",
            obj.get_type().name()?
        ))),
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// aiokafka's `BatchBuilder`, natively (see the module's comment).
#[pyclass(module = "dedupe_native", name = "BatchBuilder")]
pub struct BatchBuilder {
    /// The header's room (filled by `_build`), then the records as they were appended.
    buf: Vec<u8>,
    /// One record's bytes, before its length is known.
    record: Vec<u8>,
    batch_size: usize,
    codec: i16,
    transactional: bool,
    first_timestamp: i64,
    max_timestamp: i64,
    records: i32,
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
    closed: bool,
    built: Option<Py<PyBytes>>,
}

impl BatchBuilder {
    /// One record into the buffer (the batch is open): false, and the batch closes, when it
    /// would take the batch to its size (never the first record).
    fn append_record(
        &mut self,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let first = self.records == 0;
        let delta = if first {
            0
        } else {
            timestamp - self.first_timestamp
        };
        let rec = &mut self.record;
        rec.clear();
        rec.push(0); // attributes
        put_varint(rec, delta);
        put_varint(rec, self.records as i64); // offset delta
        put_bytes(rec, key);
        put_bytes(rec, value);
        match headers {
            Some(headers) if !headers.is_none() => {
                put_varint(rec, headers.len()? as i64);
                for header in headers.try_iter()? {
                    let header = header?;
                    let h_key = header.get_item(0)?;
                    let h_key = h_key
                        .cast::<PyString>()
                        .map_err(|_| PyTypeError::new_err("a header's key must be a str"))?;
                    let h_key = h_key.to_str()?.as_bytes();
                    put_varint(rec, h_key.len() as i64);
                    rec.extend_from_slice(h_key);
                    put_bytes(rec, bytes_arg("a header's value", &header.get_item(1)?)?);
                }
            }
            _ => put_varint(rec, 0),
        }
        let len = rec.len();
        if !first && len + varint_len(len as i64) + self.buf.len() >= self.batch_size {
            self.closed = true;
            return Ok(false);
        }
        if first {
            self.first_timestamp = timestamp;
            self.max_timestamp = timestamp;
        } else if timestamp > self.max_timestamp {
            self.max_timestamp = timestamp;
        }
        self.records += 1;
        put_varint(&mut self.buf, len as i64);
        self.buf.extend_from_slice(&self.record);
        Ok(true)
    }
}

#[pymethods]
impl BatchBuilder {
    #[new]
    #[pyo3(signature = (batch_size, compression_type, *, is_transactional = false))]
    fn new(batch_size: usize, compression_type: i16, is_transactional: bool) -> PyResult<Self> {
        if compression_type != CODEC_NONE && compression_type != CODEC_ZSTD {
            return Err(PyValueError::new_err(format!(
                "dedupe_native.BatchBuilder builds uncompressed (0) or zstd (4) batches, not \
                 codec {compression_type}"
            )));
        }
        let mut buf = Vec::with_capacity(batch_size.min(1 << 16));
        buf.resize(HEADER_SIZE, 0);
        Ok(BatchBuilder {
            buf,
            record: Vec::with_capacity(256),
            batch_size,
            codec: compression_type,
            transactional: is_transactional,
            first_timestamp: 0,
            max_timestamp: 0,
            records: 0,
            // aiokafka's BatchBuilder starts its builder with these.
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: 0,
            closed: false,
            built: None,
        })
    }

    /// Append a record: True, or None (and the batch closes) when it would take the batch past
    /// its size; a closed batch takes nothing. ``timestamp``: ms, None for now.
    #[pyo3(signature = (*, timestamp, key, value, headers = None))]
    fn append(
        &mut self,
        timestamp: Option<i64>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        headers: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Option<bool>> {
        if self.closed {
            return Ok(None);
        }
        let timestamp = timestamp.unwrap_or_else(now_ms);
        let appended = self.append_record(
            timestamp,
            bytes_arg("key", key)?,
            bytes_arg("value", value)?,
            headers,
        )?;
        Ok(appended.then_some(true))
    }

    /// Append ``records[start:]``, each a ``(timestamp, key, value, headers)`` tuple, as
    /// :meth:`append` appends them one by one (``timestamp``: ms, None for now; ``headers``: a
    /// sequence of ``(str, bytes)`` pairs or None), until the batch refuses one: the index of
    /// the first record not appended (``len(records)``: all were). The records a dedup span
    /// forwards, in one call.
    #[pyo3(signature = (records, start = 0))]
    fn extend_records(&mut self, records: &Bound<'_, PyList>, start: usize) -> PyResult<usize> {
        let end = records.len();
        if self.closed {
            return Ok(start.min(end));
        }
        const SHAPE: &str = "a record must be a (timestamp, key, value, headers) tuple";
        for i in start..end {
            let item = records.get_item(i)?;
            let record = item
                .cast::<PyTuple>()
                .map_err(|_| PyTypeError::new_err(SHAPE))?;
            if record.len() != 4 {
                return Err(PyTypeError::new_err(SHAPE));
            }
            let timestamp: Option<i64> = record.get_item(0)?.extract()?;
            let key = record.get_item(1)?;
            let value = record.get_item(2)?;
            let headers = record.get_item(3)?;
            if !self.append_record(
                timestamp.unwrap_or_else(now_ms),
                bytes_arg("key", &key)?,
                bytes_arg("value", &value)?,
                Some(&headers),
            )? {
                return Ok(i);
            }
        }
        Ok(end)
    }

    /// Append ``records[start:]``, each a ``(key, value)`` pair without headers, as
    /// :meth:`append` appends them one by one (``timestamp``: ms, None for now, taken once),
    /// until the batch refuses one: the index of the first record not appended
    /// (``len(records)``: all were). The changelog records of a commit, in one call.
    #[pyo3(signature = (records, start = 0, *, timestamp = None))]
    fn extend(
        &mut self,
        records: &Bound<'_, PyList>,
        start: usize,
        timestamp: Option<i64>,
    ) -> PyResult<usize> {
        let end = records.len();
        if self.closed {
            return Ok(start.min(end));
        }
        let timestamp = timestamp.unwrap_or_else(now_ms);
        for i in start..end {
            let item = records.get_item(i)?;
            let pair = item
                .cast::<PyTuple>()
                .map_err(|_| PyTypeError::new_err("a record must be a (key, value) tuple"))?;
            if pair.len() != 2 {
                return Err(PyTypeError::new_err(
                    "a record must be a (key, value) tuple",
                ));
            }
            let key = pair.get_item(0)?;
            let value = pair.get_item(1)?;
            if !self.append_record(
                timestamp,
                bytes_arg("key", &key)?,
                bytes_arg("value", &value)?,
                None,
            )? {
                return Ok(i);
            }
        }
        Ok(end)
    }

    fn close(&mut self) {
        self.closed = true;
    }

    fn closed(&self) -> bool {
        self.closed
    }

    fn record_count(&self) -> i32 {
        self.records
    }

    /// Bytes so far: the header's room and the records (the built batch's, once built).
    fn size(&self, py: Python<'_>) -> usize {
        match &self.built {
            Some(b) => b.bind(py).as_bytes().len(),
            None => self.buf.len(),
        }
    }

    fn _set_producer_state(
        &mut self,
        producer_id: i64,
        producer_epoch: i16,
        base_sequence: i32,
    ) -> PyResult<()> {
        if self.built.is_some() {
            // As aiokafka's, whose builder is gone once built.
            return Err(PyRuntimeError::new_err("the batch is built already"));
        }
        self.producer_id = producer_id;
        self.producer_epoch = producer_epoch;
        self.base_sequence = base_sequence;
        Ok(())
    }

    /// The batch's bytes, built once: the records compressed with the batch's codec, then its
    /// header and CRC (CRC-32C from the attributes on).
    fn _build(&mut self, py: Python<'_>) -> PyResult<Py<PyBytes>> {
        if let Some(built) = &self.built {
            return Ok(built.clone_ref(py));
        }
        self.closed = true;
        let mut attributes: i16 = if self.transactional {
            TRANSACTIONAL_MASK
        } else {
            0
        };
        if self.codec == CODEC_ZSTD {
            let data = &self.buf[HEADER_SIZE..];
            let compressed = zstd::bulk::compress(data, ZSTD_LEVEL)
                .map_err(|e| PyRuntimeError::new_err(format!("zstd: {e}")))?;
            self.buf.truncate(HEADER_SIZE);
            self.buf.extend_from_slice(&compressed);
            attributes |= self.codec;
        }
        let batch_len = (self.buf.len() - LOG_OVERHEAD) as i32;
        let last_offset_delta = (self.records - 1).max(0);
        let h = &mut self.buf[..HEADER_SIZE];
        h[0..8].copy_from_slice(&0i64.to_be_bytes()); // base offset: the broker's
        h[8..12].copy_from_slice(&batch_len.to_be_bytes());
        h[12..16].copy_from_slice(&NO_PARTITION_LEADER_EPOCH.to_be_bytes());
        h[16] = 2; // magic
        h[21..23].copy_from_slice(&attributes.to_be_bytes());
        h[23..27].copy_from_slice(&last_offset_delta.to_be_bytes());
        h[27..35].copy_from_slice(&self.first_timestamp.to_be_bytes());
        h[35..43].copy_from_slice(&self.max_timestamp.to_be_bytes());
        h[43..51].copy_from_slice(&self.producer_id.to_be_bytes());
        h[51..53].copy_from_slice(&self.producer_epoch.to_be_bytes());
        h[53..57].copy_from_slice(&self.base_sequence.to_be_bytes());
        h[57..61].copy_from_slice(&self.records.to_be_bytes());
        let crc = crc32c::crc32c(&self.buf[ATTRIBUTES_OFFSET..]);
        self.buf[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
        let built = PyBytes::new(py, &self.buf).unbind();
        self.buf = Vec::new();
        self.record = Vec::new();
        self.built = Some(built.clone_ref(py));
        Ok(built)
    }
}
