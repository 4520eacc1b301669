//! A minimal HTTP/1.1 server on 127.0.0.1 for the device tests: one request per
//! connection (`Connection: close`), each recorded (method, target, authorization,
//! body) and answered by the test's handler, which keeps the device's state.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// One request as the device saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// `GET`, `POST`.
    pub method: String,
    /// Path and query, as sent.
    pub target: String,
    /// The `Authorization` header, if any.
    pub auth: Option<String>,
    /// The `Content-Type` header, if any.
    pub content_type: Option<String>,
    /// The body (empty for GET).
    pub body: String,
}

type Handler = dyn Fn(&Request) -> (u16, String) + Send + Sync;

/// A running device; stopped on drop.
pub struct Device {
    /// `127.0.0.1:PORT`.
    pub addr: String,
    requests: Arc<Mutex<Vec<Request>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Device {
    /// Starts a device answering with `handler` (status code, JSON body).
    pub fn start(handler: impl Fn(&Request) -> (u16, String) + Send + Sync + 'static) -> Device {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let handler: Arc<Handler> = Arc::new(handler);
        let (reqs, stop2) = (requests.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if stop2.load(Ordering::SeqCst) {
                    break;
                }
                if let Ok(c) = conn {
                    serve(c, &reqs, &*handler);
                }
            }
        });
        Device {
            addr,
            requests,
            stop,
            thread: Some(thread),
        }
    }

    /// The requests received so far, and forgets them.
    pub fn take(&self) -> Vec<Request> {
        std::mem::take(&mut *self.requests.lock().unwrap())
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(&self.addr);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve(conn: TcpStream, reqs: &Mutex<Vec<Request>>, handler: &Handler) {
    let mut r = BufReader::new(conn.try_clone().unwrap());
    let mut line = String::new();
    if r.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_string();
    let target = parts.next().unwrap_or_default().to_string();
    let (mut len, mut auth, mut content_type) = (0usize, None, None);
    loop {
        let mut h = String::new();
        if r.read_line(&mut h).unwrap_or(0) == 0 || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            let v = v.trim().to_string();
            match k.to_ascii_lowercase().as_str() {
                "content-length" => len = v.parse().unwrap_or(0),
                "authorization" => auth = Some(v),
                "content-type" => content_type = Some(v),
                _ => {}
            }
        }
    }
    let mut body = vec![0; len];
    let _ = r.read_exact(&mut body);
    let req = Request {
        method,
        target,
        auth,
        content_type,
        body: String::from_utf8_lossy(&body).into_owned(),
    };
    let (code, answer) = handler(&req);
    reqs.lock().unwrap().push(req);
    let mut w = conn;
    let _ = write!(
        w,
        "HTTP/1.1 {code} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{answer}",
        answer.len()
    );
}
