//! Values one controller shares with the passes of any kind, by type: the watch cache of a kind
//! (so a pass can look at the other objects of its kind without listing them) and what a kind
//! keeps between passes about them. Knows no kind: a value is found by its Rust type.

use std::{
    any::{Any, TypeId},
    collections::HashMap,
    sync::{Arc, Mutex},
};

/// A map from a type to one shared value of it.
#[derive(Default)]
pub struct Shared(Mutex<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>);

impl Shared {
    /// Keeps `value`, replacing the one of its type (a controller started again, e.g. a leader
    /// that won its lease back, brings a new watch cache).
    pub fn set<T: Any + Send + Sync>(&self, value: T) {
        self.map().insert(TypeId::of::<T>(), Arc::new(value));
    }

    /// The value of type `T`, if one was set.
    pub fn get<T: Any + Send + Sync>(&self) -> Option<Arc<T>> {
        let value = self.map().get(&TypeId::of::<T>())?.clone();
        value.downcast::<T>().ok()
    }

    /// The value of type `T`, made with `T::default()` the first time.
    pub fn get_or_default<T: Any + Send + Sync + Default>(&self) -> Arc<T> {
        let mut map = self.map();
        let value = map
            .entry(TypeId::of::<T>())
            .or_insert_with(|| Arc::new(T::default()))
            .clone();
        value.downcast::<T>().expect("keyed by its own TypeId")
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<TypeId, Arc<dyn Any + Send + Sync>>> {
        self.0.lock().expect("shared values poisoned")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_found_by_type_and_replaced_by_a_new_one() {
        let shared = Shared::default();
        assert!(shared.get::<u32>().is_none());
        shared.set(7u32);
        shared.set(String::from("x"));
        assert_eq!(*shared.get::<u32>().unwrap(), 7);
        shared.set(8u32);
        assert_eq!(*shared.get::<u32>().unwrap(), 8);
        assert_eq!(*shared.get_or_default::<Vec<u8>>(), Vec::<u8>::new());
        assert_eq!(shared.get::<String>().unwrap().as_str(), "x");
    }
}
