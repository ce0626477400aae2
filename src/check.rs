//! `spate check`: validate a configuration end to end without writing.

use crate::cli::CheckArgs;
use crate::Exit;

pub fn check(_args: CheckArgs) -> Result<(), Exit> {
    Err(Exit::failed("spate check is not implemented yet"))
}
