//! `--shard K/N`: the K-th of N stable partitions of the task ids, so a job
//! array (Slurm, Kubernetes indexed jobs) splits one TASKS file across
//! machines and the shards' outputs concatenate into the whole run.
//!
//! A task belongs to shard `1 + (first 8 bytes of sha256(id)) mod N`: it depends
//! only on the id, never on the line order or on the other tasks. K is 1-based
//! (`1/4` … `4/4`, "the K-th of N"); the 0-based indices of job arrays are
//! converted by `from_env`.

use sha2::{Digest, Sha256};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// 1-based.
    pub index: u64,
    pub count: u64,
}

impl Shard {
    /// `K/N` with 1 ≤ K ≤ N.
    pub fn parse(text: &str) -> Result<Shard, String> {
        let usage = || format!("`--shard {text}` is not `K/N` with 1 ≤ K ≤ N (for example `1/4`)");
        let (index, count) = text.split_once('/').ok_or_else(usage)?;
        let index: u64 = index.trim().parse().map_err(|_| usage())?;
        let count: u64 = count.trim().parse().map_err(|_| usage())?;
        if count == 0 || index == 0 || index > count {
            let hint = if index == 0 && count > 0 {
                format!("; shards count from 1: `1/{count}` … `{count}/{count}`")
            } else {
                String::new()
            };
            return Err(format!("{}{hint}", usage()));
        }
        Ok(Shard { index, count })
    }

    /// `--shards N` with the index from the job array's environment:
    /// `SLURM_ARRAY_TASK_ID` (minus `SLURM_ARRAY_TASK_MIN`, default 0), else
    /// `JOB_COMPLETION_INDEX` (Kubernetes indexed jobs, 0-based).
    pub fn from_env(count: u64, env: &dyn Fn(&str) -> Option<String>) -> Result<Shard, String> {
        if count == 0 {
            return Err("`--shards` must be at least 1".into());
        }
        let number =
            |name: &str| -> Result<Option<u64>, String> {
                match env(name).filter(|value| !value.trim().is_empty()) {
                    None => Ok(None),
                    Some(value) => value.trim().parse().map(Some).map_err(|_| {
                        format!("`{name}={value}` is not a non-negative whole number")
                    }),
                }
            };
        let zero_based = if let Some(id) = number("SLURM_ARRAY_TASK_ID")? {
            if let Some(slurm_count) = number("SLURM_ARRAY_TASK_COUNT")?
                && slurm_count != count
            {
                return Err(format!(
                    "`--shards {count}` but the Slurm array has {slurm_count} tasks \
                         (`SLURM_ARRAY_TASK_COUNT`); hint: pass `--shards {slurm_count}`"
                ));
            }
            let min = number("SLURM_ARRAY_TASK_MIN")?.unwrap_or(0);
            id.checked_sub(min).ok_or_else(|| {
                format!("`SLURM_ARRAY_TASK_ID={id}` is below `SLURM_ARRAY_TASK_MIN={min}`")
            })?
        } else if let Some(index) = number("JOB_COMPLETION_INDEX")? {
            index
        } else {
            return Err(
                "`--shards` takes the shard index from `SLURM_ARRAY_TASK_ID` or \
                        `JOB_COMPLETION_INDEX`, and neither is set; hint: use `--shard K/N`"
                    .into(),
            );
        };
        if zero_based >= count {
            return Err(format!(
                "the job array index {zero_based} (0-based) is not below `--shards {count}`"
            ));
        }
        Ok(Shard {
            index: zero_based + 1,
            count,
        })
    }

    pub fn contains(&self, id: &str) -> bool {
        shard_of(id, self.count) == self.index
    }
}

/// The 1-based shard of `id` among `count`.
pub fn shard_of(id: &str, count: u64) -> u64 {
    let digest = Sha256::digest(id.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first) % count.max(1) + 1
}

impl std::fmt::Display for Shard {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "{}/{}", self.index, self.count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_one_based_shards() {
        assert_eq!(Shard::parse("2/4"), Ok(Shard { index: 2, count: 4 }));
        for bad in ["0/4", "5/4", "1/0", "x/2", "3", ""] {
            assert!(Shard::parse(bad).is_err(), "{bad}");
        }
        assert!(Shard::parse("0/4").unwrap_err().contains("`1/4`"));
    }

    #[test]
    fn shards_partition_the_ids() {
        let count = 3;
        let ids: Vec<String> = (0..300).map(|n| format!("task-{n}")).collect();
        let mut sizes = [0; 3];
        for id in &ids {
            let owners: Vec<u64> = (1..=count)
                .filter(|index| {
                    Shard {
                        index: *index,
                        count,
                    }
                    .contains(id)
                })
                .collect();
            assert_eq!(owners.len(), 1, "{id}");
            sizes[(owners[0] - 1) as usize] += 1;
        }
        assert!(sizes.iter().all(|size| *size > 50), "{sizes:?}");
        // Stable: fixed by the id alone.
        assert_eq!(shard_of("task-1", 3), shard_of("task-1", 3));
    }

    #[track_caller]
    fn env_case(vars: &[(&str, &str)], count: u64, expected: Result<u64, &str>) {
        let lookup = |name: &str| {
            vars.iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| value.to_string())
        };
        match (Shard::from_env(count, &lookup), expected) {
            (Ok(shard), Ok(index)) => assert_eq!(shard.index, index),
            (Err(error), Err(part)) => assert!(error.contains(part), "{error}"),
            (got, want) => panic!("got {got:?}, want {want:?}"),
        }
    }

    #[test]
    fn reads_job_array_indices() {
        env_case(&[("JOB_COMPLETION_INDEX", "0")], 4, Ok(1));
        env_case(&[("SLURM_ARRAY_TASK_ID", "3")], 4, Ok(4));
        env_case(
            &[("SLURM_ARRAY_TASK_ID", "4"), ("SLURM_ARRAY_TASK_MIN", "1")],
            4,
            Ok(4),
        );
        env_case(
            &[
                ("SLURM_ARRAY_TASK_ID", "1"),
                ("SLURM_ARRAY_TASK_COUNT", "8"),
            ],
            4,
            Err("--shards 8"),
        );
        env_case(&[("JOB_COMPLETION_INDEX", "4")], 4, Err("not below"));
        env_case(&[], 4, Err("neither is set"));
    }
}
