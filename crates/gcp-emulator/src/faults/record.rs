//! Recording a fault the admin API posted: each kind lands in its own piece of `Faults`.

use super::*;

impl Faults {
    /// Records a fault that changes what the cloud does from now on (every [`Fault`] except the
    /// preemptions and `FailResizeRequest`, which act on one resource at once).
    pub fn record(&mut self, f: Fault) -> Result<FollowUp, ApiError> {
        let follow_up = match f {
            Fault::FailCalls { .. } | Fault::LoseReply { .. } | Fault::Latency { .. } => {
                self.record_call_fault(f);
                FollowUp::Nothing
            }
            Fault::RandomFailures {
                rate,
                seed,
                code,
                service,
            } => {
                self.add_random(RandomState {
                    rate,
                    state: seed,
                    code,
                    service,
                })?;
                FollowUp::Nothing
            }
            Fault::VertexListLag { lists, seconds } => {
                self.vertex_list_lag = Some(ListLag { lists, seconds });
                FollowUp::Nothing
            }
            Fault::LiftVertexListLag => {
                self.vertex_list_lag = None;
                FollowUp::Nothing
            }
            Fault::Stockout { .. }
            | Fault::CapacityError { .. }
            | Fault::LiftStockout { .. }
            | Fault::ComputeCapacity { .. }
            | Fault::VertexStockout { .. }
            | Fault::LiftVertexStockout { .. } => self.record_capacity_fault(f),
            Fault::FailBatch { name, message } => FollowUp::FailBatch(self.doom(name, message)),
            Fault::FailJob { name, message } => FollowUp::FailJob(self.doom(name, message)),
            Fault::FailTpuWorkload {
                node,
                exit_code,
                message,
            } => self.fail_workload(node, exit_code, message),
            Fault::SuppressOutput { name } => {
                self.suppressed_outputs.insert(name);
                FollowUp::Nothing
            }
            Fault::PreemptNode { .. }
            | Fault::ScheduleMaintenance { .. }
            | Fault::PreemptQueuedResource { .. }
            | Fault::PreemptInstance { .. }
            | Fault::FailResizeRequest { .. }
            | Fault::PreemptJob { .. } => {
                return Err(ApiError::invalid(
                    "this fault acts on one resource; the service owning it applies it",
                ));
            }
        };
        Ok(follow_up)
    }

    /// [`Fault::FailTpuWorkload`]: the workload on `node` fails with `exit_code` (default 1).
    fn fail_workload(&mut self, node: String, exit_code: Option<i32>, message: Option<String>) -> FollowUp {
        if let Some(message) = message {
            self.messages.insert(node.clone(), message);
        }
        self.failing_workloads.insert(node, exit_code.unwrap_or(1));
        FollowUp::Nothing
    }

    /// Records a fault that acts on incoming calls (`FailCalls`, `LoseReply`, `Latency`);
    /// [`Faults::record`] sends only those here (it adds `RandomFailures`, which can be refused,
    /// itself).
    fn record_call_fault(&mut self, f: Fault) {
        match f {
            Fault::FailCalls {
                service,
                method,
                count,
                code,
                message,
            } => {
                self.fail_calls.push(FailCallsState {
                    service,
                    method,
                    remaining: count,
                    code,
                    message,
                });
            }
            Fault::LoseReply {
                service,
                method,
                count,
                code,
            } => {
                self.lost_replies.push(FailCallsState {
                    service,
                    method,
                    remaining: count,
                    code: code.unwrap_or(Code::Unavailable),
                    message: None,
                });
            }
            Fault::Latency {
                service,
                method,
                millis,
                count,
            } => {
                self.latency.push(LatencyState {
                    service,
                    method,
                    millis,
                    remaining: count,
                });
            }
            _ => unreachable!("record sends only call faults here"),
        }
    }

    /// Records a fault on capacity (TPU stockouts and capacity errors, Compute capacity, Vertex
    /// stockouts) and says what must be rechecked; [`Faults::record`] sends only those here.
    fn record_capacity_fault(&mut self, f: Fault) -> FollowUp {
        match f {
            Fault::Stockout { zone, accelerator } => {
                self.stockouts.insert((zone, accelerator));
                FollowUp::Nothing
            }
            Fault::CapacityError {
                zone,
                accelerator,
                cause,
                shape,
                quota_metric,
            } => {
                self.capacity_errors
                    .retain(|c| (&c.zone, &c.accelerator) != (&zone, &accelerator));
                self.capacity_errors.push(CapacityErrorState {
                    zone,
                    accelerator,
                    cause,
                    shape,
                    quota_metric,
                });
                FollowUp::Nothing
            }
            Fault::LiftStockout { zone, accelerator } => {
                self.capacity_errors
                    .retain(|c| (&c.zone, &c.accelerator) != (&zone, &accelerator));
                self.stockouts.remove(&(zone, accelerator));
                FollowUp::RecheckTpuAndCompute
            }
            Fault::ComputeCapacity {
                zone,
                machine_type,
                hosts,
            } => {
                let key = format!("{zone}/{machine_type}");
                match hosts {
                    Some(h) => self.compute_capacity.insert(key, h),
                    None => self.compute_capacity.remove(&key),
                };
                FollowUp::RecheckCompute
            }
            Fault::VertexStockout { location } => {
                self.vertex_stockouts.insert(location);
                FollowUp::Nothing
            }
            Fault::LiftVertexStockout { location } => {
                self.vertex_stockouts.remove(&location);
                FollowUp::Nothing
            }
            _ => unreachable!("record sends only capacity faults here"),
        }
    }

    /// Marks a batch / job (full name or id) to fail, with its message if one was given.
    fn doom(&mut self, name: String, message: Option<String>) -> String {
        if let Some(m) = message {
            self.messages.insert(name.clone(), m);
        }
        self.failing.insert(name.clone());
        name
    }

    fn add_random(&mut self, stream: RandomState) -> Result<(), ApiError> {
        let rate = stream.rate;
        if !(0.0..=1.0).contains(&rate) {
            return Err(ApiError::invalid_field(
                "rate",
                format!("rate {rate} must be within [0, 1]"),
            ));
        }
        self.random.retain(|r| r.service != stream.service);
        // A service-specific stream must win over an any-service one, so those go first.
        if stream.service.is_some() {
            self.random.insert(0, stream);
        } else {
            self.random.push(stream);
        }
        Ok(())
    }
}
