//! The HTTP(S) client shared by the Redfish, Tasmota and Shelly drivers: `ureq`
//! with rustls; each request limited to [`HTTP_LIMIT`](super::HTTP_LIMIT) (10 s,
//! connect included; `PLUGPULL_POWER_TIMEOUT` replaces it); HTTP error statuses
//! returned (not raised) so the drivers can name them. Redirects are not followed
//! (ureq would turn a POST into a GET): a 3xx is an error naming its `Location`.

use crate::Error;
use std::time::Duration;

/// An agent; `insecure` skips TLS certificate verification (self-signed BMCs).
pub fn agent(insecure: bool) -> ureq::Agent {
    let tls = ureq::tls::TlsConfig::builder()
        .disable_verification(insecure)
        .build();
    let limit = super::limit(super::HTTP_LIMIT);
    ureq::Agent::config_builder()
        .timeout_global(Some(limit))
        .timeout_connect(Some(limit.min(Duration::from_secs(5))))
        .max_redirects(0)
        .http_status_as_error(false)
        .tls_config(tls)
        .build()
        .into()
}

/// A request's answer: status code and body.
pub struct Answer {
    /// HTTP status code.
    pub status: u16,
    /// Body as text.
    pub body: String,
}

/// GET (`body` none) or POST of a JSON `body` to `url`, with an `Authorization`
/// header when given. Errors: connection, TLS or timeout (named with `what`), and a
/// redirect (3xx), naming where it pointed.
pub fn call(
    agent: &ureq::Agent,
    what: &str,
    url: &str,
    auth: Option<&str>,
    body: Option<&str>,
) -> Result<Answer, Error> {
    let fail = |e: ureq::Error| Error::Msg(format!("{what}: {url}: {e}"));
    let mut resp = match body {
        None => {
            let mut r = agent.get(url);
            if let Some(a) = auth {
                r = r.header("Authorization", a);
            }
            r.call().map_err(fail)?
        }
        Some(b) => {
            let mut r = agent.post(url).content_type("application/json");
            if let Some(a) = auth {
                r = r.header("Authorization", a);
            }
            r.send(b).map_err(fail)?
        }
    };
    let status = resp.status().as_u16();
    if (300..400).contains(&status) {
        let to = resp
            .headers()
            .get("location")
            .and_then(|l| l.to_str().ok())
            .unwrap_or("nowhere");
        return Err(Error::Msg(format!(
            "{what}: {url} answered HTTP {status}, a redirect to {to}: not followed (fix the URI)"
        )));
    }
    let body = resp.body_mut().read_to_string().map_err(fail)?;
    Ok(Answer { status, body })
}

/// `Err` naming the request when the status is not 2xx.
pub fn expect_ok(what: &str, method: &str, url: &str, a: Answer) -> Result<Answer, Error> {
    if (200..300).contains(&a.status) {
        Ok(a)
    } else {
        let body: String = a.body.trim().chars().take(200).collect();
        Err(Error::Msg(format!(
            "{what}: {method} {url} answered HTTP {}: {body}",
            a.status
        )))
    }
}
