//! The page shell of `plugpull report`: one self-contained HTML document (inline CSS,
//! inline SVG, no script, no external font, image or link to load), and the escaping
//! every text taken from the run goes through.

/// `s` with `&`, `<`, `>`, `"` and `'` escaped for HTML text and attribute values.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `s` as one Markdown table cell or line: `|` escaped, line ends made spaces.
pub fn md(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

const STYLE: &str =
    "body{font-family:sans-serif;max-width:820px;margin:1em auto;padding:0 1em;color:#222}\
h1{font-size:1.4em}h2{font-size:1.15em;margin-bottom:.2em}\
.how{color:#555;margin-top:0;font-size:.9em}\
.pass{color:#1b5e20;font-weight:bold}.fail{color:#b71c1c;font-weight:bold}\
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 8px;text-align:left}\
td.n{text-align:right}td.t{white-space:nowrap}pre{background:#f6f6f6;padding:.5em;white-space:pre-wrap;font-size:.85em}\
.warn{color:#8a5300;font-weight:bold}\
figure{margin:1.5em 0}svg{display:block;max-width:100%;height:auto}";

/// An HTML page being assembled, section by section.
#[derive(Default)]
pub struct Page {
    body: String,
    figures: usize,
    /// Prefixed to figure ids, so several runs' parts on one page keep them unique.
    prefix: String,
}

impl Page {
    /// Starts a part of a page holding several runs: a rule and an `<h1>` title
    /// (escaped); figure ids after it start with `id` and `-`.
    pub fn part(&mut self, id: &str, title: &str) {
        self.body
            .push_str(&format!("<hr>\n<h1>{}</h1>\n", escape(title)));
        self.prefix = format!("{id}-");
    }

    /// Adds a heading (`<h2>`) and a one-line "how to read it", both escaped.
    pub fn heading(&mut self, title: &str, how: &str) {
        self.body.push_str(&format!(
            "<h2>{}</h2>\n<p class=\"how\">How to read it: {}</p>\n",
            escape(title),
            escape(how)
        ));
    }

    /// Adds a figure: heading, how to read it, the SVG (inline, as drawn), and an
    /// optional escaped note below it.
    pub fn figure(&mut self, id: &str, title: &str, how: &str, svg: &str, note: &str) {
        self.figures += 1;
        self.body.push_str(&format!(
            "<figure class=\"fig\" id=\"{}{}\">\n",
            escape(&self.prefix),
            escape(id)
        ));
        self.heading(title, how);
        self.body.push_str(svg);
        if !note.is_empty() {
            self.body
                .push_str(&format!("\n<figcaption>{}</figcaption>", escape(note)));
        }
        self.body.push_str("\n</figure>\n");
    }

    /// Adds a paragraph of escaped text, with an optional CSS class.
    pub fn para(&mut self, text: &str, class: &str) {
        match class {
            "" => self.body.push_str(&format!("<p>{}</p>\n", escape(text))),
            c => self
                .body
                .push_str(&format!("<p class=\"{c}\">{}</p>\n", escape(text))),
        }
    }

    /// Adds preformatted escaped text.
    pub fn pre(&mut self, text: &str) {
        self.pre_class(text, "");
    }

    /// Adds preformatted text, escaped, with CSS class `class` (`""`: none).
    pub fn pre_class(&mut self, text: &str, class: &str) {
        let attr = if class.is_empty() {
            String::new()
        } else {
            format!(" class=\"{class}\"")
        };
        self.body
            .push_str(&format!("<pre{attr}>{}</pre>\n", escape(text)));
    }

    /// Adds a two-column table of (name, value) rows, escaped; values right-aligned.
    pub fn table(&mut self, head: (&str, &str), rows: &[(String, String)]) {
        self.body.push_str(&format!(
            "<table><tr><th>{}</th><th>{}</th></tr>\n",
            escape(head.0),
            escape(head.1)
        ));
        for (k, v) in rows {
            self.body.push_str(&format!(
                "<tr><td>{}</td><td class=\"n\">{}</td></tr>\n",
                escape(k),
                escape(v)
            ));
        }
        self.body.push_str("</table>\n");
    }

    /// Adds a table with header `head` and `rows` (cells escaped), each row marked on
    /// its left edge with its colour in `colors` (`#RRGGBB`, one per row; fewer: none).
    /// A cell without a space (a time, a run id, a number) does not wrap.
    pub fn grid(&mut self, head: &[&str], rows: &[Vec<String>], colors: &[String]) {
        self.body.push_str("<table><tr>");
        for h in head {
            self.body.push_str(&format!("<th>{}</th>", escape(h)));
        }
        self.body.push_str("</tr>\n");
        for (i, r) in rows.iter().enumerate() {
            match colors.get(i) {
                Some(c) => self.body.push_str(&format!(
                    "<tr style=\"border-left:6px solid {}\">",
                    escape(c)
                )),
                None => self.body.push_str("<tr>"),
            }
            for cell in r {
                // One token (a time, a run id, a number) is never broken across lines.
                let class = if cell.contains(' ') {
                    ""
                } else {
                    " class=\"t\""
                };
                self.body
                    .push_str(&format!("<td{class}>{}</td>", escape(cell)));
            }
            self.body.push_str("</tr>\n");
        }
        self.body.push_str("</table>\n");
    }

    /// Adds a bulleted list of escaped items.
    pub fn list(&mut self, items: &[String]) {
        self.body.push_str("<ul>\n");
        for i in items {
            self.body.push_str(&format!("<li>{}</li>\n", escape(i)));
        }
        self.body.push_str("</ul>\n");
    }

    /// Figures added so far.
    pub fn figures(&self) -> usize {
        self.figures
    }

    /// The whole document, titled `title` (escaped), with `data-figures` on `<body>`
    /// saying how many figures it holds.
    pub fn finish(self, title: &str) -> String {
        format!(
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
             <title>{t}</title><style>{STYLE}</style></head>\n\
             <body data-figures=\"{n}\">\n<h1>{t}</h1>\n{b}</body></html>\n",
            t = escape(title),
            n = self.figures,
            b = self.body
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_from_the_run_cannot_open_a_tag() {
        assert_eq!(
            escape("<script>alert('x') & \"y\"</script>"),
            "&lt;script&gt;alert(&#39;x&#39;) &amp; &quot;y&quot;&lt;/script&gt;"
        );
        let mut p = Page::default();
        p.figure("f", "a<b", "read <it>", "<svg></svg>", "");
        p.para("x<y", "fail");
        let html = p.finish("run <1>");
        assert!(html.contains("<body data-figures=\"1\">"));
        assert!(html.contains("<h2>a&lt;b</h2>"));
        assert!(html.contains("<p class=\"fail\">x&lt;y</p>"));
        assert!(!html.contains("<script"));
        assert!(!html.contains("http"));
    }
}
