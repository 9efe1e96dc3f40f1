//! The bytes the watch cache keeps per object: its JSON compressed with zstd against a dictionary
//! of its kind.
//!
//! Objects of one kind are mostly the same text: every key of the schema, the namespace, labels,
//! condition types and reasons, the accelerator type, the bucket paths. Compressed alone, a 2–3 KiB
//! object keeps about a third of its size (zstd needs to see a phrase once before it can refer to
//! it); compressed against an earlier object of the same kind, only what differs is kept. So each
//! kind gets a dictionary once per process: the JSON of the first object of that kind the watch
//! delivers, used as zstd "raw content" (no training step, no format to version; zstd reads any
//! bytes as a dictionary of prefixes, see `ZSTD_dct_rawContent` in zstd.h). The dictionary is
//! never replaced, because every entry compressed with it must still decode.

use std::{
    any::TypeId,
    collections::HashMap,
    marker::PhantomData,
    sync::{Arc, Mutex, OnceLock},
};

use serde::{Serialize, de::DeserializeOwned};

use zstd::{
    bulk::{Compressor, Decompressor},
    dict::{DecoderDictionary, EncoderDictionary},
};

/// zstd's fastest regular level. Against a dictionary, objects this small compress as well at
/// level 1 as at the default 3 (2,000 converged 1.1 KiB TpuSlices: 216 KB at level 1, 225 KB at
/// level 3), and level 3's double-fast match finder was the largest single symbol of the
/// operator's CPU profile at N = 10,000 (1.9%): the watch compresses every event of a burst.
const LEVEL: i32 = 1;
/// A dictionary longer than this is cut: a huge first object (a long startup script) would cost
/// memory for the whole process while the keys and common values sit in its first kilobytes.
const MAX_DICTIONARY: usize = 16 * 1024;

/// Compresses and restores the JSON of one kind's objects.
pub struct Codec {
    compressor: Mutex<Compressor<'static>>,
    decompressor: Mutex<Decompressor<'static>>,
}

/// One object's JSON, compressed.
#[derive(Clone)]
pub struct Compressed {
    bytes: Box<[u8]>,
    /// The JSON's length, which zstd's one-shot decompression needs for its output buffer.
    len: u32,
}

impl Compressed {
    /// Bytes kept for this object.
    pub fn stored_len(&self) -> usize {
        self.bytes.len()
    }

    /// Bytes of the JSON it stands for.
    pub fn json_len(&self) -> usize {
        self.len as usize
    }
}

/// A value of type `T` kept as its JSON, compressed against the dictionary of `T` (see
/// [`Codec::of`]): the watch cache's objects, and the cloud watch's listed resources.
pub struct Packed<T> {
    json: Compressed,
    codec: Arc<Codec>,
    kind: PhantomData<fn() -> T>,
}

/// Why a value could not be packed or restored.
#[derive(Debug, thiserror::Error)]
pub enum PackError {
    #[error("encoding the object as JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("compressing or restoring the cached JSON: {0}")]
    Compression(#[from] Error),
}

impl<T: Serialize + DeserializeOwned + 'static> Packed<T> {
    pub fn new(value: &T) -> Result<Self, PackError> {
        let plain = serde_json::to_vec(value)?;
        let codec = Codec::of::<T>(&plain)?;
        let json = codec.compress(&plain)?;
        Ok(Self {
            json,
            codec,
            kind: PhantomData,
        })
    }

    pub fn decode(&self) -> Result<T, PackError> {
        let plain = self.codec.decompress(&self.json)?;
        Ok(serde_json::from_slice(&plain)?)
    }
}

impl<T> Packed<T> {
    /// Bytes kept.
    pub fn stored_len(&self) -> usize {
        self.json.stored_len()
    }

    /// Bytes of the JSON it stands for.
    pub fn json_len(&self) -> usize {
        self.json.json_len()
    }
}

impl<T> Clone for Packed<T> {
    fn clone(&self) -> Self {
        Self {
            json: self.json.clone(),
            codec: self.codec.clone(),
            kind: PhantomData,
        }
    }
}

/// Why bytes could not be compressed or restored: zstd's own error (an allocation failure, or
/// bytes that are not what this codec wrote).
pub type Error = std::io::Error;

impl Codec {
    /// The codec of kind `K`, made from `sample` (that kind's first object) on first use.
    pub fn of<K: 'static>(sample: &[u8]) -> Result<Arc<Codec>, Error> {
        static CODECS: OnceLock<Mutex<HashMap<TypeId, Arc<Codec>>>> = OnceLock::new();
        let mut codecs = CODECS
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(codec) = codecs.get(&TypeId::of::<K>()) {
            return Ok(codec.clone());
        }
        let codec = Arc::new(Codec::with_dictionary(sample)?);
        codecs.insert(TypeId::of::<K>(), codec.clone());
        Ok(codec)
    }

    /// A codec whose dictionary is (the start of) `sample`.
    fn with_dictionary(sample: &[u8]) -> Result<Codec, Error> {
        let dictionary = &sample[..sample.len().min(MAX_DICTIONARY)];
        // One dictionary per kind for the life of the process (three in all), shared by every
        // entry of that kind: leaking them is what gives the codecs their 'static lifetime.
        let encoder: &'static EncoderDictionary<'static> =
            Box::leak(Box::new(EncoderDictionary::copy(dictionary, LEVEL)));
        let decoder: &'static DecoderDictionary<'static> =
            Box::leak(Box::new(DecoderDictionary::copy(dictionary)));
        Ok(Codec {
            compressor: Mutex::new(Compressor::with_prepared_dictionary(encoder)?),
            decompressor: Mutex::new(Decompressor::with_prepared_dictionary(decoder)?),
        })
    }

    pub fn compress(&self, json: &[u8]) -> Result<Compressed, Error> {
        let len = u32::try_from(json.len()).map_err(|_| Error::other("object larger than 4 GiB"))?;
        let bytes = lock(&self.compressor).compress(json)?.into_boxed_slice();
        Ok(Compressed { bytes, len })
    }

    pub fn decompress(&self, compressed: &Compressed) -> Result<Vec<u8>, Error> {
        lock(&self.decompressor).decompress(&compressed.bytes, compressed.json_len())
    }
}

/// A codec's state is zstd's scratch space, valid after any panic elsewhere: a poisoned lock is
/// taken as it is.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(name: &str, phase: &str) -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({
            "apiVersion": "tpu.example.dev/v1alpha1",
            "kind": "TpuSlice",
            "metadata": {"name": name, "namespace": "team-a", "uid": format!("uid-{name}"),
                         "labels": {"app.kubernetes.io/part-of": "training"}},
            "spec": {"acceleratorType": "v5litepod-8", "runtimeVersion": "v2-alpha-tpuv5-lite",
                     "zone": "us-central1-a", "capacity": {"spot": {}}},
            "status": {"phase": phase, "nodeName": format!("projects/p/locations/us-central1-a/nodes/{name}"),
                       "conditions": [{"type": "Ready", "status": "True", "reason": "NodeReady",
                                       "message": "the node is READY", "lastTransitionTime": "2026-11-24T10:00:00Z"}]}
        }))
        .unwrap()
    }

    #[test]
    fn restores_the_exact_bytes() {
        let codec = Codec::with_dictionary(&object("first", "Provisioning")).unwrap();
        for (name, phase) in [("first", "Provisioning"), ("other", "Ready"), ("", "")] {
            let json = object(name, phase);
            let compressed = codec.compress(&json).unwrap();
            assert_eq!(codec.decompress(&compressed).unwrap(), json);
        }
        let empty = codec.compress(b"").unwrap();
        assert!(codec.decompress(&empty).unwrap().is_empty());
    }

    #[test]
    fn an_object_like_the_dictionary_keeps_only_what_differs() {
        let codec = Codec::with_dictionary(&object("slice-00001", "Provisioning")).unwrap();
        let json = object("slice-09999", "Ready");
        let compressed = codec.compress(&json).unwrap();
        let alone = zstd::bulk::compress(&json, LEVEL).unwrap();
        assert!(
            compressed.stored_len() * 4 < alone.len(),
            "{} bytes against the dictionary, {} alone, {} raw",
            compressed.stored_len(),
            alone.len(),
            json.len()
        );
    }

    #[test]
    fn one_codec_per_kind_whatever_the_later_samples() {
        struct KindA;
        struct KindB;
        let a = Codec::of::<KindA>(b"{\"kind\":\"A\"}").unwrap();
        let again = Codec::of::<KindA>(b"something else entirely").unwrap();
        let b = Codec::of::<KindB>(b"{\"kind\":\"B\"}").unwrap();
        assert!(Arc::ptr_eq(&a, &again));
        assert!(!Arc::ptr_eq(&a, &b));
        let json = b"{\"kind\":\"A\",\"n\":1}";
        assert_eq!(again.decompress(&a.compress(json).unwrap()).unwrap(), json);
    }
}
