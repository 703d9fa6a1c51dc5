// A Java TLS client (JSSE) for capture's unread-reason test: connects to
// 127.0.0.1:PORT, trusts any certificate (the test's own), writes a line,
// reads the echo, exits.
import java.io.*;
import java.security.cert.X509Certificate;
import javax.net.ssl.*;

public class TLSClient {
    public static void main(String[] args) throws Exception {
        TrustManager[] all = { new X509TrustManager() {
            public X509Certificate[] getAcceptedIssuers() { return new X509Certificate[0]; }
            public void checkClientTrusted(X509Certificate[] c, String a) {}
            public void checkServerTrusted(X509Certificate[] c, String a) {}
        } };
        SSLContext ctx = SSLContext.getInstance("TLS");
        ctx.init(null, all, null);
        try (SSLSocket s = (SSLSocket) ctx.getSocketFactory().createSocket("127.0.0.1", Integer.parseInt(args[0]))) {
            s.getOutputStream().write("hello from java\n".getBytes());
            s.getOutputStream().flush();
            System.out.println(new BufferedReader(new InputStreamReader(s.getInputStream())).readLine());
        }
    }
}
