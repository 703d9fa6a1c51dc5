// Round trip over iceoryx2 publish-subscribe for `cistern bench cbuf`.
// usage: cbuf-iox2-rtt ping|pong SIZE ITERS poll|block TAG
// ping sends SIZE bytes on "<TAG>/a2b" and waits for the reply on
// "<TAG>/b2a"; pong echoes. "block" waits on an iceoryx2 event listener
// instead of spinning on receive(). ping prints the mean round trip in ns.
use iceoryx2::prelude::*;
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a: Vec<String> = std::env::args().collect();
    if a.len() != 6 {
        eprintln!("usage: cbuf-iox2-rtt ping|pong SIZE ITERS poll|block TAG");
        std::process::exit(2);
    }
    let ping = a[1] == "ping";
    let size: usize = a[2].parse()?;
    let iters: u64 = a[3].parse()?;
    let block = a[4] == "block";
    let tag = &a[5];
    set_log_level(LogLevel::Error);
    let node = NodeBuilder::new().create::<ipc::Service>()?;
    let (out_name, in_name) = if ping { ("a2b", "b2a") } else { ("b2a", "a2b") };
    let mk = |n: &str| -> Result<_, Box<dyn std::error::Error>> {
        Ok(node
            .service_builder(&ServiceName::new(&format!("{tag}/{n}"))?)
            .publish_subscribe::<[u8]>()
            .history_size(0)
            .subscriber_max_buffer_size(1)
            .enable_safe_overflow(true)
            .open_or_create()?)
    };
    let svc_out = mk(out_name)?;
    let svc_in = mk(in_name)?;
    let ev = |n: &str| -> Result<_, Box<dyn std::error::Error>> {
        Ok(node
            .service_builder(&ServiceName::new(&format!("{tag}/ev-{n}"))?)
            .event()
            .open_or_create()?)
    };
    let ev_out = ev(out_name)?;
    let ev_in = ev(in_name)?;
    let publisher = svc_out.publisher_builder().initial_max_slice_len(size).create()?;
    let subscriber = svc_in.subscriber_builder().create()?;
    let notifier = ev_out.notifier_builder().create()?;
    let listener = ev_in.listener_builder().create()?;

    // Poll like cbufbench: spin up to 20 us, then give the CPU away.
    let recv = || -> Result<(), Box<dyn std::error::Error>> {
        let mut spin_since: Option<Instant> = None;
        loop {
            if let Some(s) = subscriber.receive()? {
                // touch the payload like the other modes do
                std::hint::black_box(s.payload()[0]);
                return Ok(());
            }
            if block {
                listener.blocking_wait_one()?;
            } else {
                std::hint::spin_loop();
                let start = *spin_since.get_or_insert_with(Instant::now);
                if start.elapsed().as_nanos() >= 20_000 {
                    std::thread::yield_now();
                    spin_since = None;
                }
            }
        }
    };
    let send = |i: u64| -> Result<(), Box<dyn std::error::Error>> {
        let mut s = publisher.loan_slice_uninit(size)?;
        s.payload_mut()[0].write(i as u8);
        let s = unsafe { s.assume_init() };
        s.send()?;
        if block {
            notifier.notify()?;
        }
        Ok(())
    };
    // Wait until both sides are connected.
    while svc_out.dynamic_config().number_of_subscribers() == 0 || svc_in.dynamic_config().number_of_publishers() == 0 {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    std::thread::sleep(std::time::Duration::from_millis(50));
    if ping {
        let warm = iters / 10 + 1;
        for i in 0..warm { send(i)?; recv()?; }
        let t = Instant::now();
        for i in 0..iters { send(i)?; recv()?; }
        println!("{}", t.elapsed().as_nanos() as u64 / iters);
    } else {
        let warm = iters / 10 + 1;
        for i in 0..warm + iters { recv()?; send(i)?; }
    }
    Ok(())
}
