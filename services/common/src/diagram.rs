//! docs/workers.svg, the README's picture: every worker binary of the table (its workers and
//! their idle intervals, core or sidecar) around PostgreSQL, the one coordination point, with
//! the API and the executors at its sides. Generated from [`crate::workers::WORKERS`], so the
//! picture cannot fall behind the table; `QTG_UPDATE_DOCS=1 cargo test -p qtg-service diagram`
//! writes it.

use std::fmt::Write;

use qtg_runtime::workers::Group;

use crate::workers::{binaries, WORKERS};

const BOX_W: i32 = 330;
const LINE: i32 = 17;
const GAP: i32 = 14;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// A rounded box with a bold title and lines of text under it.
fn block(
    out: &mut String,
    (x, y, w): (i32, i32, i32),
    title: &str,
    lines: &[String],
    (fill, stroke): (&str, &str),
) -> i32 {
    let h = 30 + LINE * lines.len() as i32 + 6;
    let _ = write!(
        out,
        r#"<rect x="{x}" y="{y}" width="{w}" height="{h}" rx="8" fill="{fill}" stroke="{stroke}" stroke-width="1.5"/>"#
    );
    let _ = write!(out, r#"<text x="{}" y="{}" class="t">{}</text>"#, x + 10, y + 20, esc(title));
    for (i, l) in lines.iter().enumerate() {
        let _ = write!(out, r#"<text x="{}" y="{}" class="s">{}</text>"#, x + 10, y + 38 + LINE * i as i32, esc(l));
    }
    out.push('\n');
    h
}

/// The SVG, deterministic for a given table.
pub fn workers_svg() -> String {
    let bins = binaries();
    // Two columns of worker binaries to the right of PostgreSQL, filled top to bottom.
    let heights: Vec<i32> =
        bins.iter().map(|b| 30 + LINE * WORKERS.iter().filter(|w| w.binary == *b).count() as i32 + 6).collect();
    let half = bins.len().div_ceil(2);
    let col_h = |range: std::ops::Range<usize>| heights[range].iter().map(|h| h + GAP).sum::<i32>();
    let height = 90 + col_h(0..half).max(col_h(half..bins.len())) + 40;
    let (pg_x, pg_y, pg_w, pg_h) = (400, height / 2 - 70, 190, 140);
    let mut body = String::new();
    // Workers.
    let (mut y0, mut y1) = (80, 80);
    let mut links = String::new();
    for (i, b) in bins.iter().enumerate() {
        let workers: Vec<_> = WORKERS.iter().filter(|w| w.binary == *b).collect();
        let core = workers.iter().any(|w| w.group == Group::Core);
        let lines: Vec<String> = workers
            .iter()
            .map(|w| {
                let flag =
                    w.enabled_by.map_or(String::new(), |f| format!(", {}", if f.default { "on" } else { "off" }));
                format!("{} · every {} s{}", w.name, w.default_interval.as_secs_f64(), flag)
            })
            .collect();
        let (x, y) = if i < half { (650, &mut y0) } else { (650 + BOX_W + 30, &mut y1) };
        let (fill, stroke) = if core { ("#ddf4ff", "#0b5cad") } else { ("#f6f8fa", "#57606a") };
        let title = format!("{b} ({})", if core { "core" } else { "sidecar" });
        let h = block(&mut body, (x, *y, BOX_W), &title, &lines, (fill, stroke));
        if i < half {
            let _ = write!(
                links,
                r##"<path d="M {} {} L {x} {}" stroke="#8c959f" fill="none"/>"##,
                pg_x + pg_w,
                pg_y + pg_h / 2,
                *y + h / 2
            );
        }
        *y += h + GAP;
    }
    // PostgreSQL.
    let _ = write!(
        body,
        r##"<rect x="{pg_x}" y="{pg_y}" width="{pg_w}" height="{pg_h}" rx="18" fill="#fff1c2" stroke="#8a5a00" "##
    );
    let mid = pg_x + pg_w / 2;
    let _ = writeln!(body, r##"stroke-width="2"/>"##);
    for (dy, class, text) in
        [(50, "h", "PostgreSQL"), (78, "s", "movements, nodes, leases,"), (96, "s", "audit, outbox, NOTIFY")]
    {
        let _ =
            writeln!(body, r#"<text x="{mid}" y="{}" class="{class}" text-anchor="middle">{text}</text>"#, pg_y + dy);
    }
    // The API and its callers on the left.
    let api_y = pg_y - 10;
    let api = [
        "HTTP /v3 (JSON), /console, OpenAPI".to_string(),
        "roles, approvals, four-eyes".to_string(),
        "operator actions, audit".to_string(),
    ];
    let h = block(&mut body, (40, api_y, 300), "qtg-api", &api, ("#dafbe1", "#1a7f37"));
    let _ = write!(
        links,
        r##"<path d="M 340 {} L {pg_x} {}" stroke="#8c959f" fill="none"/>"##,
        api_y + h / 2,
        pg_y + pg_h / 2
    );
    let people = ["treasury systems (API keys)".to_string(), "operators (console, qtgctl)".to_string()];
    let ph = block(&mut body, (40, api_y - 110, 300), "callers", &people, ("#ffffff", "#8c959f"));
    let _ = write!(
        links,
        r##"<path d="M 190 {} L 190 {api_y}" stroke="#8c959f" fill="none" marker-end="url(#a)"/>"##,
        api_y - 110 + ph
    );
    let out = [
        "in-process lanes: sim, CEX, EVM, CCTP, CCIP".to_string(),
        "remote executors (gRPC / HTTP-JSON)".to_string(),
        "a separate signer; signed callbacks".to_string(),
    ];
    let oy = api_y + h + 40;
    block(&mut body, (40, oy, 300), "called by the workers, never under a lock", &out, ("#ffffff", "#8c959f"));
    let width = 650 + 2 * BOX_W + 30 + 40;
    let head = [
        format!(r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" "#),
        format!(r#"viewBox="0 0 {width} {height}" "#),
        r#"font-family="Helvetica, Arial, sans-serif">"#.to_string(),
        "\n<!-- Generated from services/common/src/workers.rs by services/common/src/diagram.rs: do not edit. -->\n"
            .to_string(),
        r#"<defs><marker id="a" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" "#.to_string(),
        r##"orient="auto"><path d="M 0 0 L 10 5 L 0 10 z" fill="#8c959f"/></marker></defs>"##.to_string(),
        "\n<style>.t{font-size:14px;font-weight:700;fill:#1f2328}.s{font-size:12px;fill:#1f2328}".to_string(),
        ".h{font-size:20px;font-weight:700;fill:#1f2328}.c{font-size:13px;fill:#4b535d}</style>\n".to_string(),
        format!(r##"<rect width="{width}" height="{height}" fill="#ffffff"/>"##),
        "\n".to_string(),
        r#"<text x="40" y="36" class="h">qtg: one Deployment per worker, all coordinated through PostgreSQL</text>"#
            .to_string(),
        "\n".to_string(),
        r#"<text x="40" y="58" class="c">Every box coordinates only through PostgreSQL; `qtg` runs them all in one "#
            .to_string(),
        "process (make run). Blue: core (a failure stops the process); grey: sidecars (isolated); intervals are \
         idle polls.</text>\n"
            .to_string(),
    ];
    let mut svg = head.concat();
    svg.push_str(&links);
    svg.push('\n');
    svg.push_str(&body);
    svg.push_str("</svg>\n");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/workers.svg is the table's picture; `QTG_UPDATE_DOCS=1` writes it.
    #[test]
    fn the_workers_diagram_is_current() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/workers.svg");
        let svg = workers_svg();
        if std::env::var_os("QTG_UPDATE_DOCS").is_some() {
            std::fs::write(&path, &svg).unwrap();
        }
        let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            on_disk == svg,
            "docs/workers.svg is stale: run QTG_UPDATE_DOCS=1 cargo test -p qtg-service the_workers_diagram_is_current"
        );
        for b in binaries() {
            assert!(svg.contains(b), "the diagram shows {b}");
        }
    }
}
