// The transport's floor under herd's round trip (bench/README.md, "zmq_round_trip"):
// raw libzmq on loopback TCP, one application thread per process, no herd.
//   relay:  client DEALER -> relay ROUTER (a "scheduler" process) -> echo DEALER (a "worker"
//           process) and back: 4 TCP hops, herd's topology;
//   direct: client DEALER <-> echo ROUTER: 2 TCP hops.
//   tcp:    the relay's hops on plain TCP sockets, each read and written by its process's one
//           thread (blocking, TCP_NODELAY), no ZeroMQ: what the path costs without ZeroMQ's I/O
//           threads between a socket and its reader. With "curve", every 48-byte message is
//           sealed (crypto_box_easy_afternm, CURVE's per-message box) before each send and
//           opened after each receive.
// Built with the benchmarks (it needs only libzmq, and libsodium for tcp's boxes):
//   build/bench/zmq_round_trip relay curve 2000      # MODE plain|curve ROUNDS [PORT]
//   build/bench/zmq_round_trip relay curve serve     # blocks of round trips on demand (stdin)
//   build/bench/zmq_round_trip tcp curve 2000        # the relay without ZeroMQ
// (without PORT: a free one, asked of the kernel; a bind that fails, or a peer silent for 10 s,
// ends it with an error rather than a hang).
// Prints {"mode":...,"curve":0|1,"p50_us":...,"p99_us":...} after 100 warm-up round trips.
// HERD_RELAY_WORK_US="C,S,W" (relay and tcp) adds C, S and W microseconds of busy work per round
// trip to the client, the relay and the echo's thread (the relay's half before each of its two
// sends): a relay that does as much as herd's threads do, to see what a microsecond of work
// on the path costs the round trip (docs/design-notes.md, "The round trip").
#include <zmq.h>
#include <sodium.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <csignal>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>
#include <algorithm>
#include <string>
static char spub[41], ssec[41], cpub[41], csec[41];
static bool curve = false;
static double work_c = 0, work_s = 0, work_w = 0;  // HERD_RELAY_WORK_US
static void busy(double us){ if(us<=0) return; const auto t0=std::chrono::steady_clock::now();
  while(std::chrono::duration<double,std::micro>(std::chrono::steady_clock::now()-t0).count()<us){} }
static void as_server(void* s){ if(!curve) return; int one=1; zmq_setsockopt(s,ZMQ_CURVE_SERVER,&one,4); zmq_setsockopt(s,ZMQ_CURVE_SECRETKEY,ssec,40);}
// A listening socket on 127.0.0.1 at a port the kernel picks (`port`).
static int tcp_listen(int& port){ int fd=socket(AF_INET,SOCK_STREAM,0); sockaddr_in a{}; a.sin_family=AF_INET; a.sin_addr.s_addr=htonl(INADDR_LOOPBACK);
  socklen_t n=sizeof a; if(fd<0||bind(fd,(sockaddr*)&a,n)!=0||listen(fd,4)!=0||getsockname(fd,(sockaddr*)&a,&n)!=0){perror("zmq_round_trip: listen on 127.0.0.1"); exit(1);}
  port=ntohs(a.sin_port); return fd; }
static int free_port(){ int port=0; close(tcp_listen(port)); return port; }
static void must_bind(void* s,const char* ep){ if(zmq_bind(s,ep)!=0){fprintf(stderr,"zmq_round_trip: cannot bind %s: %s\n",ep,zmq_strerror(zmq_errno())); _exit(1);} }
static void as_client(void* s){ if(!curve) return; zmq_setsockopt(s,ZMQ_CURVE_SERVERKEY,spub,40); zmq_setsockopt(s,ZMQ_CURVE_PUBLICKEY,cpub,40); zmq_setsockopt(s,ZMQ_CURVE_SECRETKEY,csec,40);}
// The tcp mode: one boxed (or plain) 48-byte message each way per hop.
static unsigned char box_key[crypto_box_BEFORENMBYTES];
static const std::size_t kMsg = 48, kWire = kMsg + crypto_box_MACBYTES + crypto_box_NONCEBYTES;
static void tcp_nodelay(int fd){ int one=1; setsockopt(fd,IPPROTO_TCP,TCP_NODELAY,&one,sizeof one); }
static int tcp_dial(int port){ for(int i=0;i<10000;i++){ int fd=socket(AF_INET,SOCK_STREAM,0); sockaddr_in a{}; a.sin_family=AF_INET; a.sin_addr.s_addr=htonl(INADDR_LOOPBACK); a.sin_port=htons(port);
    if(connect(fd,(sockaddr*)&a,sizeof a)==0){ tcp_nodelay(fd); return fd; } close(fd); usleep(1000); }
  fprintf(stderr,"zmq_round_trip: cannot connect to 127.0.0.1:%d\n",port); exit(1); }
static bool tcp_read(int fd,unsigned char* b,std::size_t n){ while(n){ ssize_t r=read(fd,b,n); if(r<=0) return false; b+=r; n-=r; } return true; }
static void tcp_write(int fd,const unsigned char* b,std::size_t n){ while(n){ ssize_t r=write(fd,b,n); if(r<=0){perror("zmq_round_trip: tcp write"); _exit(1);} b+=r; n-=r; } }
// Sends msg (kMsg bytes) on fd, boxed under a fresh nonce when curve. tcp_recv: false when the peer left.
static void tcp_send(int fd,unsigned char* msg){ unsigned char w[kWire];
  if(!curve){ tcp_write(fd,msg,kMsg); return; }
  randombytes_buf(w,crypto_box_NONCEBYTES);
  if(crypto_box_easy_afternm(w+crypto_box_NONCEBYTES,msg,kMsg,w,box_key)!=0){ fprintf(stderr,"zmq_round_trip: a box did not seal\n"); _exit(1); }
  tcp_write(fd,w,kWire); }
static bool tcp_recv(int fd,unsigned char* msg){ unsigned char w[kWire];
  if(!curve) return tcp_read(fd,msg,kMsg);
  if(!tcp_read(fd,w,kWire)) return false;
  if(crypto_box_open_easy_afternm(msg,w+crypto_box_NONCEBYTES,kWire-crypto_box_NONCEBYTES,w,box_key)!=0){ fprintf(stderr,"zmq_round_trip: a box did not open\n"); _exit(1); }
  return true; }
static int tcp_mode(int rounds){
  if(sodium_init()<0){ fprintf(stderr,"zmq_round_trip: libsodium did not initialise\n"); return 1; }
  unsigned char pk[crypto_box_PUBLICKEYBYTES], sk[crypto_box_SECRETKEYBYTES]; if(crypto_box_keypair(pk,sk)!=0||crypto_box_beforenm(box_key,pk,sk)!=0){ fprintf(stderr,"zmq_round_trip: no box key\n"); return 1; }
  int pc=0, pw=0; const int lc=tcp_listen(pc), lw=tcp_listen(pw);
  if(fork()==0){ prctl(PR_SET_PDEATHSIG,SIGKILL); // relay (scheduler)
    const int w=accept(lw,nullptr,nullptr), c=accept(lc,nullptr,nullptr); tcp_nodelay(w); tcp_nodelay(c); unsigned char m[kMsg];
    while(tcp_recv(c,m)){ busy(work_s/2); tcp_send(w,m); if(!tcp_recv(w,m)) break; busy(work_s/2); tcp_send(c,m); } _exit(0); }
  if(fork()==0){ prctl(PR_SET_PDEATHSIG,SIGKILL); // echo (worker)
    const int s=tcp_dial(pw); unsigned char m[kMsg]; while(tcp_recv(s,m)){ busy(work_w); tcp_send(s,m); } _exit(0); }
  const int s=tcp_dial(pc); unsigned char m[kMsg]; memset(m,'c',kMsg); std::vector<double> us;
  for(int i=0;i<rounds+100;i++){ auto t0=std::chrono::steady_clock::now(); busy(work_c); tcp_send(s,m);
    if(!tcp_recv(s,m)){ fprintf(stderr,"zmq_round_trip: the relay left\n"); return 1; }
    if(i>=100) us.push_back(std::chrono::duration<double,std::micro>(std::chrono::steady_clock::now()-t0).count()); }
  std::sort(us.begin(),us.end());
  printf("{\"mode\":\"tcp\",\"curve\":%d,\"p50_us\":%.1f,\"p99_us\":%.1f}\n",curve,us[us.size()/2],us[us.size()*99/100]);
  close(s); while(wait(nullptr)>0){}
  return 0; }
int main(int argc,char**argv){
  std::string mode = argc>1?argv[1]:"relay"; curve = argc>2 && std::string(argv[2])=="curve";
  const bool serve = argc>3 && std::string(argv[3])=="serve";  // ROUNDS "serve": blocks on demand (below)
  int rounds = argc>3 && !serve ? atoi(argv[3]) : 2000;
  if (!serve && rounds < 1) { fprintf(stderr, "zmq_round_trip: ROUNDS must be a positive number or 'serve'\n"); return 2; }
  if (const char* w = getenv("HERD_RELAY_WORK_US")) {
    if (sscanf(w, "%lf,%lf,%lf", &work_c, &work_s, &work_w) != 3 || work_c < 0 || work_s < 0 || work_w < 0) {
      fprintf(stderr, "zmq_round_trip: HERD_RELAY_WORK_US must be C,S,W (microseconds, >= 0), not '%s'\n", w); return 2; } }
  if (mode=="tcp") { if (serve) { fprintf(stderr,"zmq_round_trip: tcp has no serve mode\n"); return 2; } return tcp_mode(rounds); }
  if (mode!="relay" && mode!="direct") { fprintf(stderr,"zmq_round_trip: MODE is relay, direct or tcp, not '%s'\n",mode.c_str()); return 2; }
  zmq_curve_keypair(spub,ssec); zmq_curve_keypair(cpub,csec);
  const std::string eps = "tcp://127.0.0.1:" + (argc>4 ? std::string(argv[4]) : std::to_string(free_port())); const char* ep=eps.c_str();
  if (mode=="relay") {
    if (fork()==0){ prctl(PR_SET_PDEATHSIG,SIGKILL); // relay (scheduler)
      void* ctx=zmq_ctx_new(); void* r=zmq_socket(ctx,ZMQ_ROUTER); as_server(r); must_bind(r,ep);
      char cid[256], wid[256]; size_t cl=0, wl=0; char buf[512];
      while(true){ char id[256]; int il=zmq_recv(r,id,256,0); int n=zmq_recv(r,buf,512,0);
        if(n==1&&buf[0]=='W'){memcpy(wid,id,il);wl=il;continue;}
        if(n==1&&buf[0]=='Q'){zmq_send(r,wid,wl,ZMQ_SNDMORE); zmq_send(r,"Q",1,0); usleep(50000); break;}
        busy(work_s/2); if(n>0&&buf[0]=='c'){memcpy(cid,id,il);cl=il; zmq_send(r,wid,wl,ZMQ_SNDMORE); zmq_send(r,buf,n,0);} else {zmq_send(r,cid,cl,ZMQ_SNDMORE); zmq_send(r,buf,n,0);} }
      _exit(0);}
    usleep(100000);
    if (fork()==0){ prctl(PR_SET_PDEATHSIG,SIGKILL); // worker
      void* ctx=zmq_ctx_new(); void* d=zmq_socket(ctx,ZMQ_DEALER); as_client(d); zmq_connect(d,ep); zmq_send(d,"W",1,0);
      char buf[512]; while(true){int n=zmq_recv(d,buf,512,0); if(n<=1)break; buf[0]='w'; busy(work_w); zmq_send(d,buf,n,0);} _exit(0);}
    usleep(200000);
  } else {
    if (fork()==0){ prctl(PR_SET_PDEATHSIG,SIGKILL); void* ctx=zmq_ctx_new(); void* r=zmq_socket(ctx,ZMQ_ROUTER); as_server(r); must_bind(r,ep);
      char buf[512]; while(true){ char id[256]; int il=zmq_recv(r,id,256,0); int n=zmq_recv(r,buf,512,0); if(n==1&&buf[0]=='Q')break; zmq_send(r,id,il,ZMQ_SNDMORE); zmq_send(r,buf,n,0);} _exit(0);}
    usleep(100000);
  }
  void* ctx=zmq_ctx_new(); void* d=zmq_socket(ctx,ZMQ_DEALER); as_client(d); int ms=10000; zmq_setsockopt(d,ZMQ_RCVTIMEO,&ms,sizeof ms); zmq_connect(d,ep);
  char msg[64]; memset(msg,'c',64); char buf[512]; std::vector<double> us;
  auto round_trips=[&](int n,bool keep){ for(int i=0;i<n;i++){ auto t0=std::chrono::steady_clock::now(); busy(work_c); zmq_send(d,msg,48,0);
      if(zmq_recv(d,buf,512,0)<0){fprintf(stderr,"zmq_round_trip: no echo within 10 s\n"); exit(1);}
      if(keep) us.push_back(std::chrono::duration<double,std::micro>(std::chrono::steady_clock::now()-t0).count()); } };
  round_trips(100,false);  // warm-up
  if (serve) {
    // Blocks on demand, so that another program can interleave its own round trips with these
    // in short turns: a line "N" on stdin runs N round trips and answers one line of their
    // times in µs; end of input (or 0) stops. "ready" says the warm-up is done.
    printf("ready\n"); fflush(stdout);
    int n=0;
    while (scanf("%d",&n)==1 && n>0) {
      us.clear(); round_trips(n,true);
      for (std::size_t i=0;i<us.size();i++) printf(i?" %.1f":"%.1f",us[i]);
      printf("\n"); fflush(stdout);
    }
  } else {
    round_trips(rounds,true);
    std::sort(us.begin(),us.end());
    printf("{\"mode\":\"%s\",\"curve\":%d,\"p50_us\":%.1f,\"p99_us\":%.1f}\n",mode.c_str(),curve,us[us.size()/2],us[us.size()*99/100]);
  }
  zmq_send(d,"Q",1,0); while (wait(nullptr) > 0) {}
  return 0; }
