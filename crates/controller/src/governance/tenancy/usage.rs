//! What a namespace holds right now: TPU chips and estimated burn rate of whatever its objects
//! hold, as each kind prices its own objects (a [`HoldingsLister`] per kind, given to [`Tenancy`]
//! when the process starts). [`sum`] is pure; [`Listed::read`] asks every kind's lister, and
//! [`super::book`] keeps what admissions read between listings.
//!
//! [`Tenancy`]: super::Tenancy

use futures::future::BoxFuture;
use k8s_openapi::{api::core::v1::ObjectReference, apimachinery::pkg::apis::meta::v1::Condition};
use kube::{Api, Resource, core::NamespaceResourceScope};
use serde::de::DeserializeOwned;
use tpu_operator_api::conditions::{find_condition, reasons, status, types};

use crate::{
    governance::pricing::PriceTable,
    runtime::{
        error::{ReconcileError, Result},
        listing,
    },
};

/// Chips and spend the rest of a namespace holds.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Usage {
    pub chips: u32,
    pub per_hour_usd: f64,
    /// `TpuSlice a (8 chips, $21.60/h)`, ... for messages.
    pub holders: Vec<String>,
}

impl Usage {
    pub fn describe(&self) -> String {
        if self.holders.is_empty() {
            "nothing running".to_string()
        } else {
            self.holders.join(", ")
        }
    }

    fn add(&mut self, what: String, chips: u32, per_hour_usd: f64) {
        self.chips += chips;
        self.per_hour_usd += per_hour_usd;
        self.holders
            .push(format!("{what} ({chips} chips, ${per_hour_usd:.2}/h)"));
    }
}

/// What one object holds now: chips and estimated spend.
#[derive(Clone, Debug, PartialEq)]
pub struct Holding {
    /// The holder's UID: the one thing about it a tenant cannot write.
    pub uid: String,
    /// `TpuSlice a`, for messages: the kind's words for what holds it.
    pub what: String,
    pub chips: u32,
    pub per_hour_usd: f64,
}

impl Holding {
    /// A holding of the object `uid` (none known: empty, as the object's own never matches it).
    pub fn new(uid: Option<String>, what: String, chips: u32, per_hour_usd: f64) -> Self {
        Self {
            uid: uid.unwrap_or_default(),
            what,
            chips,
            per_hour_usd,
        }
    }
}

/// Sums `holdings` but the one of the object being admitted (`exclude`, its UID). Only the
/// object's own UID is left out: ownerReferences, labels and names are the tenant's to write, so
/// nothing else it could point at one object may take another out of the count (a pipeline's
/// children count like any other object while they hold something).
pub fn sum<'a>(holdings: impl IntoIterator<Item = &'a Holding>, exclude: &str) -> Usage {
    let mut usage = Usage::default();
    for h in holdings.into_iter().filter(|h| h.uid != exclude) {
        usage.add(h.what.clone(), h.chips, h.per_hour_usd);
    }
    usage
}

/// What a namespace's objects hold, and how many of them a policy refuses: read a page at a time
/// ([`listing::for_each`]) and kept as that alone, so that a namespace of large objects costs one
/// page of them.
#[derive(Debug, Default)]
pub struct Listed {
    pub holdings: Vec<Holding>,
    /// The objects holding something, for the Events of a budget action.
    pub holders: Vec<ObjectReference>,
    /// Objects `Stalled` with reason `PolicyDenied`.
    pub refused: u32,
}

impl Listed {
    /// Reads `namespace` through every kind's lister, in their order.
    pub async fn read(
        client: &kube::Client,
        namespace: &str,
        prices: &PriceTable,
        listers: &[Box<dyn HoldingsLister>],
    ) -> Result<Self> {
        let mut listed = Self::default();
        for lister in listers {
            lister.read(client, namespace, prices, &mut listed).await?;
        }
        Ok(listed)
    }

    fn hold<K: Resource<DynamicType = ()>>(&mut self, obj: &K, holding: Option<Holding>) {
        if let Some(h) = holding {
            self.holdings.push(h);
            self.holders.push(obj.object_ref(&()));
        }
    }

    fn count_refused(&mut self, conditions: Option<&[Condition]>) {
        let refused = conditions
            .and_then(|c| find_condition(c, types::STALLED))
            .is_some_and(|c| c.status == status::TRUE && c.reason == reasons::POLICY_DENIED);
        self.refused += u32::from(refused);
    }
}

/// One kind's part of a namespace's usage: lists the kind's objects in a namespace and adds what
/// each holds to a [`Listed`]. The kinds supply these when the process starts, so governance
/// counts every kind without knowing any.
pub trait HoldingsLister: Send + Sync {
    fn read<'a>(
        &'a self,
        client: &'a kube::Client,
        namespace: &'a str,
        prices: &'a PriceTable,
        listed: &'a mut Listed,
    ) -> BoxFuture<'a, Result<()>>;
}

/// The lister of a kind `K`, from what the kind knows of its objects: what one holds and its
/// conditions (for the count of refused objects).
pub struct HoldingsOf<K> {
    /// What a failed list was doing, for its error: `list TpuSlices for the namespace's usage`.
    pub action: &'static str,
    /// What the object holds now (`None`: nothing).
    pub holding: fn(&K, &PriceTable) -> Option<Holding>,
    /// The object's status conditions, when it has a status.
    pub conditions: fn(&K) -> Option<&[Condition]>,
}

impl<K> HoldingsLister for HoldingsOf<K>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    fn read<'a>(
        &'a self,
        client: &'a kube::Client,
        namespace: &'a str,
        prices: &'a PriceTable,
        listed: &'a mut Listed,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let api = Api::<K>::namespaced(client.clone(), namespace);
            listing::for_each(&api, |obj| {
                listed.hold(&obj, (self.holding)(&obj, prices));
                listed.count_refused((self.conditions)(&obj));
            })
            .await
            .map_err(ReconcileError::kube(self.action))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(uid: &str, what: &str, chips: u32, per_hour_usd: f64) -> Holding {
        Holding::new(Some(uid.into()), what.into(), chips, per_hour_usd)
    }

    /// Only the admitted object's own UID leaves the count; what each holder is comes from its
    /// kind, word for word.
    #[test]
    fn sums_every_holding_but_the_excluded_one() {
        let holdings = [
            held("u-a", "TpuSlice a", 8, 10.8),
            held("u-me", "TpuSlice me", 8, 10.8),
            held("u-b", "PreprocessBatch b", 0, 1.5),
        ];
        let u = sum(&holdings, "u-me");
        assert_eq!(u.chips, 8);
        assert!((u.per_hour_usd - 12.3).abs() < 1e-9, "{u:?}");
        assert_eq!(
            u.describe(),
            "TpuSlice a (8 chips, $10.80/h), PreprocessBatch b (0 chips, $1.50/h)"
        );
        assert_eq!(sum(&[], "").describe(), "nothing running");
    }
}
