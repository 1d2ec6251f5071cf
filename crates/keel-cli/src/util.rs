//! Small helpers shared by the commands.

use std::path::Path;
use std::str::FromStr;

/// A byte count given on the command line: plain bytes, or with a K/M/G/T
/// suffix meaning powers of two (`16K` = 16384; `KiB`, `KB` spellings work
/// too).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Size(pub u64);

impl Size {
    pub fn bytes(self) -> u64 {
        self.0
    }
}

impl FromStr for Size {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_size(s).map(Size)
    }
}

impl std::fmt::Display for Size {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&format_size(self.0))
    }
}

/// Parse `4096`, `16K`, `16KiB`, `1M`, `2G`, `1T` (powers of two).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let digits_end = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, suffix) = t.split_at(digits_end);
    if num.is_empty() {
        return Err(format!(
            "`{s}` is not a size: expected bytes or a number with K, M, G or T"
        ));
    }
    let n: u64 = num
        .parse()
        .map_err(|_| format!("`{s}`: number too large"))?;
    let shift = match suffix.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        other => {
            return Err(format!(
                "`{s}`: unknown size suffix `{other}` (use K, M, G or T)"
            ))
        }
    };
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| format!("`{s}`: size too large"))
}

/// `16384` → `16 KiB`, `1048576` → `1 MiB`, `1000` → `1000 B`.
pub fn format_size(n: u64) -> String {
    for (shift, unit) in [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if n >= 1 << shift && n % (1 << shift) == 0 {
            return format!("{} {unit}", n >> shift);
        }
    }
    format!("{n} B")
}

/// `85899345920` → `80.0 GiB`: a size for people, rounded to one decimal
/// (for free space and other figures that are never round numbers).
pub fn format_size_approx(n: u64) -> String {
    for (shift, unit) in [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if n >= 1 << shift {
            return format!("{:.1} {unit}", n as f64 / (1u64 << shift) as f64);
        }
    }
    format!("{n} B")
}

/// Create `dir` (and parents) if it is missing, with a clear error.
pub fn ensure_dir(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)
        .map_err(|e| anyhow::anyhow!("cannot create directory {}: {e}", dir.display()))?;
    if !dir.is_dir() {
        anyhow::bail!("{} exists and is not a directory", dir.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("16K"), Ok(16384));
        assert_eq!(parse_size("16k"), Ok(16384));
        assert_eq!(parse_size("16KiB"), Ok(16384));
        assert_eq!(parse_size("1M"), Ok(1 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert!(parse_size("").is_err());
        assert!(parse_size("K").is_err());
        assert!(parse_size("12X").is_err());
        assert!(parse_size("99999999999999999999").is_err());
        assert!(parse_size("99999999999T").is_err());
        assert_eq!(format_size(16384), "16 KiB");
        assert_eq!(format_size(1000), "1000 B");
        assert_eq!(format_size_approx(80 << 30), "80.0 GiB");
        assert_eq!(format_size_approx(1536), "1.5 KiB");
        assert_eq!(format_size_approx(7), "7 B");
    }
}
