//! Markdown tables for text reports, and the number formats they use.

/// How a column's cells are aligned (numbers right, names left).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Align {
    Left,
    Right,
}

/// A GitHub-flavoured markdown table with padded columns, readable both as
/// plain text in a terminal and rendered.
#[derive(Clone, Debug, Default)]
pub struct Table {
    headers: Vec<(String, Align)>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(headers: &[(&str, Align)]) -> Table {
        Table {
            headers: headers.iter().map(|(h, a)| (h.to_string(), *a)).collect(),
            rows: Vec::new(),
        }
    }

    /// Add a row; missing cells print empty, extra cells are an error.
    pub fn push(&mut self, row: Vec<String>) {
        assert!(
            row.len() <= self.headers.len(),
            "row has {} cells, table has {} columns",
            row.len(),
            self.headers.len()
        );
        self.rows.push(row);
    }

    /// The table as markdown, one line per row, ending with a newline.
    pub fn render(&self) -> String {
        let widths: Vec<usize> = (0..self.headers.len())
            .map(|c| {
                let cells = self.rows.iter().filter_map(|r| r.get(c));
                cells
                    .chain(std::iter::once(&self.headers[c].0))
                    .map(|s| s.chars().count())
                    .max()
                    .unwrap_or(0)
                    .max(3)
            })
            .collect();
        let line = |cells: Vec<&str>| {
            let padded: Vec<String> = cells
                .iter()
                .zip(&widths)
                .zip(&self.headers)
                .map(|((cell, &w), (_, align))| match align {
                    Align::Left => format!("{cell:<w$}"),
                    Align::Right => format!("{cell:>w$}"),
                })
                .collect();
            format!("| {} |\n", padded.join(" | "))
        };
        let mut out = line(self.headers.iter().map(|(h, _)| h.as_str()).collect());
        let rule: Vec<String> = widths
            .iter()
            .zip(&self.headers)
            .map(|(&w, (_, align))| match align {
                // The cell's padding spaces become dashes; a right-aligned
                // column ends with `:` right before the pipe.
                Align::Left => "-".repeat(w + 2),
                Align::Right => format!("{}:", "-".repeat(w + 1)),
            })
            .collect();
        out.push_str(&format!("|{}|\n", rule.join("|")));
        for row in &self.rows {
            let cells = (0..self.headers.len())
                .map(|c| row.get(c).map_or("", String::as_str))
                .collect();
            out.push_str(&line(cells));
        }
        out
    }
}

/// `23094.4` with 0 decimals → `23,094`; thousands separated so that long
/// columns of durations can be compared at a glance.
pub fn number(value: f64, decimals: usize) -> String {
    if !value.is_finite() {
        return value.to_string();
    }
    let text = format!("{:.*}", decimals, value.abs());
    let (int, frac) = text.split_once('.').unwrap_or((&text, ""));
    let mut grouped = String::new();
    for (i, ch) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(ch);
    }
    let sign = if value < 0.0 && text.chars().any(|c| c != '0' && c != '.') {
        "-"
    } else {
        ""
    };
    if frac.is_empty() {
        format!("{sign}{grouped}")
    } else {
        format!("{sign}{grouped}.{frac}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers() {
        assert_eq!(number(23094.4, 0), "23,094");
        assert_eq!(number(0.3524, 3), "0.352");
        assert_eq!(number(1234567.891, 1), "1,234,567.9");
        assert_eq!(number(-1500.0, 0), "-1,500");
        assert_eq!(number(-0.0001, 2), "0.00");
        assert_eq!(number(999.0, 0), "999");
    }

    #[test]
    fn renders_aligned_markdown() {
        let mut t = Table::new(&[("method", Align::Left), ("ms", Align::Right)]);
        t.push(vec!["fdatasync".into(), "23,022".into()]);
        t.push(vec!["buffered".into()]);
        let text = t.render();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "| method    |     ms |");
        assert_eq!(lines[1], "|-----------|-------:|");
        assert_eq!(lines[2], "| fdatasync | 23,022 |");
        assert_eq!(lines[3], "| buffered  |        |");
    }
}
