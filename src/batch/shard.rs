//! `--shard K/N`: the K-th of N stable partitions of the task ids, so a job
//! array (Slurm, Kubernetes indexed jobs) splits one TASKS file across
//! machines and the shards' outputs concatenate into the whole run.
//!
//! A task belongs to shard `1 + (first 8 bytes of sha256(id)) mod N`: it depends
//! only on the id, never on the line order or on the other tasks. K is 1-based
//! (`1/4` … `4/4`, "the K-th of N"); the 0-based indices of job arrays are
//! converted by `from_env`.

use crate::sha256::Sha256;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// 1-based.
    pub index: u64,
    pub count: u64,
}

/// The shard a command line asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requested {
    /// The whole file.
    Whole,
    /// `--shard K/N`, or `--shards N` with a job array that tells K.
    Given(Shard),
    /// `--shards N` in a job array that does not tell which shard this is
    /// (fewer tasks than N: a resubmitted element).
    Unknown {
        count: u64,
        /// Why, in a sentence.
        reason: String,
        /// The shard the array task id names when the array ran `0…N−1`.
        guess: Option<Shard>,
    },
}

/// What Slurm says about an array task (its `SLURM_ARRAY_TASK_*` variables).
struct SlurmArray {
    id: u64,
    min: Option<u64>,
    max: Option<u64>,
    step: Option<u64>,
    count: Option<u64>,
}

impl SlurmArray {
    fn shard(&self, shards: u64) -> Result<Requested, String> {
        let SlurmArray { id, .. } = *self;
        let min = self.min.unwrap_or(0);
        let step = self.step.unwrap_or(1);
        if step == 0 {
            return Err("`SLURM_ARRAY_TASK_STEP=0` is not a step".into());
        }
        if id < min {
            return Err(format!(
                "`SLURM_ARRAY_TASK_ID={id}` is below `SLURM_ARRAY_TASK_MIN={min}`"
            ));
        }
        // Tasks in the array: Slurm's count, else what MIN, MAX and STEP span.
        let spanned = self
            .max
            .filter(|max| *max >= min)
            .map(|max| (max - min) / step + 1);
        let tasks = self.count.or(spanned);
        let evenly_spaced = (id - min).is_multiple_of(step)
            && match (tasks, self.max) {
                (Some(tasks), Some(max)) => max - min == step.saturating_mul(tasks - 1),
                _ => true,
            };
        let position = (id - min) / step;
        match tasks {
            Some(0) => Err("`SLURM_ARRAY_TASK_COUNT=0` is not an array".into()),
            Some(tasks) if tasks < shards => Ok(Requested::Unknown {
                count: shards,
                reason: format!(
                    "this Slurm array has {} (`SLURM_ARRAY_TASK_COUNT`), not the \
                     {shards} of `--shards {shards}`, as when one element is resubmitted, so \
                     which shard array task {id} is cannot be read from it",
                    crate::words::count(tasks, "task", "tasks")
                ),
                guess: (id < shards).then_some(Shard {
                    index: id + 1,
                    count: shards,
                }),
            }),
            Some(tasks) if tasks > shards => Err(format!(
                "`--shards {shards}` but the Slurm array has {tasks} tasks \
                 (`SLURM_ARRAY_TASK_COUNT`); hint: pass `--shards {tasks}`"
            )),
            _ if !evenly_spaced => Err(format!(
                "the Slurm array's indices are not evenly spaced (`SLURM_ARRAY_TASK_MIN={min}`, \
                 `SLURM_ARRAY_TASK_MAX={}`, `SLURM_ARRAY_TASK_STEP={step}`), so the place of array \
                 task {id} in it is unknown; hint: use `--array=0-{}` or pass `--shard K/{shards}`",
                self.max.map_or("?".to_string(), |max| max.to_string()),
                shards - 1
            )),
            _ if position >= shards => Err(format!(
                "array task {id} is number {} of the Slurm array, past `--shards {shards}`",
                position + 1
            )),
            _ => Ok(Requested::Given(Shard {
                index: position + 1,
                count: shards,
            })),
        }
    }
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

    /// `--shards N` with this shard's position read from the job array's
    /// environment. Slurm: `(SLURM_ARRAY_TASK_ID − SLURM_ARRAY_TASK_MIN) /
    /// SLURM_ARRAY_TASK_STEP` in an array of `SLURM_ARRAY_TASK_COUNT` tasks
    /// (so `--array=0-7`, `--array=1-8` and `--array=0-14:2` all give shards
    /// 1…8 of 8); the indices must be evenly spaced (a list such as
    /// `--array=1,2,9` is not). Kubernetes indexed jobs: `JOB_COMPLETION_INDEX`
    /// (0-based). An array with fewer tasks than N, as when one element is
    /// resubmitted (`sbatch --array=2` sees an array of one), does not say
    /// which shard it is: that is `Requested::Unknown`, settled by the output
    /// directory's record of its shard (`batch::directory`) or refused.
    pub fn from_env(count: u64, env: &dyn Fn(&str) -> Option<String>) -> Result<Requested, String> {
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
        if let Some(id) = number("SLURM_ARRAY_TASK_ID")? {
            let array = SlurmArray {
                id,
                min: number("SLURM_ARRAY_TASK_MIN")?,
                max: number("SLURM_ARRAY_TASK_MAX")?,
                step: number("SLURM_ARRAY_TASK_STEP")?,
                count: number("SLURM_ARRAY_TASK_COUNT")?,
            };
            return array.shard(count);
        }
        match number("JOB_COMPLETION_INDEX")? {
            Some(index) if index < count => Ok(Requested::Given(Shard {
                index: index + 1,
                count,
            })),
            Some(index) => Err(format!(
                "`JOB_COMPLETION_INDEX={index}` is not below `--shards {count}`; hint: \
                 pass `--shards` the job's `completions`"
            )),
            None => Err("`--shards` takes the shard from `SLURM_ARRAY_TASK_ID` or \
                 `JOB_COMPLETION_INDEX`, and neither is set; hint: use `--shard K/N`"
                .into()),
        }
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
    fn env_case(vars: &[(&str, &str)], count: u64, expected: Result<Option<u64>, &str>) {
        let lookup = |name: &str| {
            vars.iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| value.to_string())
        };
        match (Shard::from_env(count, &lookup), expected) {
            (Ok(Requested::Given(shard)), Ok(Some(index))) => {
                assert_eq!((shard.index, shard.count), (index, count))
            }
            (Ok(Requested::Unknown { .. }), Ok(None)) => {}
            (Err(error), Err(part)) => assert!(error.contains(part), "{error}"),
            (got, want) => panic!("got {got:?}, want {want:?}"),
        }
    }

    /// The variables Slurm sets for array task `id` of `--array=min-max:step`.
    fn slurm(id: u64, min: u64, max: u64, step: u64) -> Vec<(&'static str, String)> {
        vec![
            ("SLURM_ARRAY_TASK_ID", id.to_string()),
            ("SLURM_ARRAY_TASK_MIN", min.to_string()),
            ("SLURM_ARRAY_TASK_MAX", max.to_string()),
            ("SLURM_ARRAY_TASK_STEP", step.to_string()),
            (
                "SLURM_ARRAY_TASK_COUNT",
                ((max - min) / step + 1).to_string(),
            ),
        ]
    }

    #[track_caller]
    fn slurm_case(
        id: u64,
        min: u64,
        max: u64,
        step: u64,
        count: u64,
        expected: Result<Option<u64>, &str>,
    ) {
        let vars = slurm(id, min, max, step);
        let vars: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
        env_case(&vars, count, expected);
    }

    #[test]
    fn reads_job_array_indices() {
        env_case(&[("JOB_COMPLETION_INDEX", "0")], 4, Ok(Some(1)));
        env_case(&[("JOB_COMPLETION_INDEX", "4")], 4, Err("not below"));
        env_case(&[("SLURM_ARRAY_TASK_ID", "3")], 4, Ok(Some(4)));
        env_case(&[], 4, Err("neither is set"));
        // --array=0-3 and --array=1-4: four shards either way.
        slurm_case(0, 0, 3, 1, 4, Ok(Some(1)));
        slurm_case(3, 0, 3, 1, 4, Ok(Some(4)));
        slurm_case(1, 1, 4, 1, 4, Ok(Some(1)));
        slurm_case(4, 1, 4, 1, 4, Ok(Some(4)));
        // A larger array than shards is a mistake in the flags.
        slurm_case(1, 0, 7, 1, 4, Err("--shards 8"));
    }

    #[test]
    fn stepped_arrays_keep_every_shard() {
        // --array=0-6:2 is tasks 0, 2, 4, 6: shards 1…4 of 4, none lost.
        let shards: Vec<u64> = [0, 2, 4, 6]
            .into_iter()
            .map(|id| {
                let vars = slurm(id, 0, 6, 2);
                let vars: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
                let lookup = |name: &str| {
                    vars.iter()
                        .find(|(key, _)| *key == name)
                        .map(|(_, value)| value.to_string())
                };
                match Shard::from_env(4, &lookup) {
                    Ok(Requested::Given(shard)) => shard.index,
                    other => panic!("{other:?}"),
                }
            })
            .collect();
        assert_eq!(shards, [1, 2, 3, 4]);
        slurm_case(7, 1, 7, 2, 4, Ok(Some(4)));
        // Without COUNT (older Slurm), MIN, MAX and STEP give it.
        env_case(
            &[
                ("SLURM_ARRAY_TASK_ID", "4"),
                ("SLURM_ARRAY_TASK_MIN", "0"),
                ("SLURM_ARRAY_TASK_MAX", "6"),
                ("SLURM_ARRAY_TASK_STEP", "2"),
            ],
            4,
            Ok(Some(3)),
        );
        // --array=1,2,9: three tasks whose places cannot be computed.
        env_case(
            &[
                ("SLURM_ARRAY_TASK_ID", "9"),
                ("SLURM_ARRAY_TASK_MIN", "1"),
                ("SLURM_ARRAY_TASK_MAX", "9"),
                ("SLURM_ARRAY_TASK_STEP", "1"),
                ("SLURM_ARRAY_TASK_COUNT", "3"),
            ],
            3,
            Err("not evenly spaced"),
        );
        env_case(
            &[("SLURM_ARRAY_TASK_ID", "2"), ("SLURM_ARRAY_TASK_STEP", "0")],
            3,
            Err("not a step"),
        );
    }

    #[test]
    fn a_resubmitted_element_does_not_guess_its_shard() {
        // `sbatch --array=2` of a script with `--shards 8`: an array of one.
        let vars = slurm(2, 2, 2, 1);
        let vars: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let lookup = |name: &str| {
            vars.iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| value.to_string())
        };
        match Shard::from_env(8, &lookup) {
            Ok(Requested::Unknown {
                count,
                reason,
                guess,
            }) => {
                assert_eq!(count, 8);
                assert!(reason.contains("resubmitted"), "{reason}");
                assert_eq!(guess, Some(Shard { index: 3, count: 8 }));
            }
            other => panic!("{other:?}"),
        }
    }
}
