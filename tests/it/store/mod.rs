//! Stores: the conformance suite, old database formats, durability, full disks, the writer.

mod conformance;
mod db_format_0_1_0;
mod db_format_pg_4;
mod db_format_schema_3;
mod disk_full;
mod durability_modes;
mod open_errors;
mod postgres_tls;
mod run_list;
mod storage_flat;
mod writer_priority;
